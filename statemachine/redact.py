"""Remove secrets from text before it leaves the node (e.g. in a request to an LLM adviser).

Two nets: the values of environment variables whose names say they are secret (`*KEY*`,
`*TOKEN*`, `*SECRET*`, passwords, credentials), replaced wherever they appear; and the
shapes secrets take in logs and YAML (`Authorization:` headers, `Bearer …`, `api_key: …`,
`token=…`, well-known key prefixes such as `sk-…`, `hf_…`, `ghp_…`, `AKIA…`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["REDACTED", "Redactor", "secret_name"]

REDACTED = "[REDACTED]"
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
MIN_SECRET_CHARS = 6  # shorter values ("1", "true") would blank out half of any text
_PLAIN_VALUE = re.compile(r"(?i)^(?:true|false|none|null|yes|no|on|off|-?\d+(?:\.\d+)?)$")
# A key in a log line or YAML that holds a secret (`max_tokens`, `tokenizer_path` do not).
_KEY_WORD = (r"(?:api[_-]?key|apikey|access[_-]?key|private[_-]?key|secret|password|passwd|credential"
             r"|(?<![a-z])token(?!s|izer|_?(?:len|num|count|limit|ids?)\b))")
_SECRET_KEY = re.compile(_KEY_WORD, re.IGNORECASE)

_PATTERNS = (
    # Authorization / Proxy-Authorization headers, whatever the scheme.
    re.compile(r"(?i)((?:proxy-)?authorization\s*[:=]\s*)(?:\"[^\"]*\"|'[^']*'|[^\r\n]*)"),
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{4,}"),
    # key: value / key=value / "key": "value" where the key names a secret.
    re.compile(r"(?i)([\"']?[A-Za-z0-9_.-]*" + _KEY_WORD + r"[A-Za-z0-9_.-]*[\"']?\s*[:=]\s*)"
               r"(?!(?:-?\d+(?:\.\d+)?|true|false|null|none)\b)(\"[^\"\r\n]*\"|'[^'\r\n]*'|[^\s,}\]\r\n]+)"),
    # Well-known key formats.
    re.compile(r"()\b(?:sk-[A-Za-z0-9_-]{8,}|hf_[A-Za-z0-9]{8,}|gh[pousr]_[A-Za-z0-9]{8,}|"
               r"github_pat_[A-Za-z0-9_]{8,}|xox[abpr]-[A-Za-z0-9-]{8,}|AKIA[0-9A-Z]{16}|"
               r"AIza[0-9A-Za-z_-]{20,})"),
    # user:password@ in URLs.
    re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^/\s:@]+:)[^@\s/]+(?=@)"),
)


def _worth_hiding(value: str) -> bool:
    """Long enough and not a plain word or number, so replacing it cannot blank out ordinary text."""
    value = value.strip()
    return len(value) >= MIN_SECRET_CHARS and not _PLAIN_VALUE.match(value)


def secret_name(name: str) -> bool:
    """Whether an environment variable's name says its value is a secret."""
    return bool(_SECRET_NAME.search(name))


class Redactor:
    """Built once per request from the environments involved and any extra known secrets."""

    def __init__(self, envs: Iterable[Mapping[str, str]] = (), extra: Iterable[str] = ()) -> None:
        values: set[str] = {v for v in extra if v and _worth_hiding(v)}
        for env in envs:
            for name, value in env.items():
                if secret_name(name) and isinstance(value, str) and _worth_hiding(value):
                    values.add(value.strip())
                    values.add(value)
        # Longest first, so a secret that contains another is replaced whole.
        self._values = sorted(values, key=len, reverse=True)

    def text(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, REDACTED)
        for pattern in _PATTERNS:
            text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
        return text

    def data(self, value: Any) -> Any:
        """The same structure with every string (keys included) redacted."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): (REDACTED if isinstance(v, str) and v and _SECRET_KEY.search(str(k))
                                        else self.data(v)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        return value
