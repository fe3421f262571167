"""Remove secrets from text before it leaves the node (e.g. in a request to an LLM adviser).

Two nets: the values of environment variables whose names say they are secret (`*KEY*`,
`*TOKEN*`, `*SECRET*`, `*PASS*`, `*PWD*`, `*ACCESS*`, `*CREDENTIAL*`, `*AUTH*`; not the shell's
`PWD`), replaced wherever they appear; and the shapes secrets take in logs and YAML
(`Authorization:` and `Cookie:` headers, `Bearer …`, `api_key: …`, `token=…`, `db_pass=…`, `*_CREDS=…`,
`--password X`, `--api-key=X`, `-pPASSWORD` (mysql, sshpass, 7z), the key of `swanlab login -k KEY`,
`wandb login KEY`, `huggingface-cli login --token X`, JWTs, PEM blocks over several lines,
`scheme://user:password@`, well-known key prefixes such as `sk-…`, `hf_…`, `ghp_…`, `AKIA…`).
Tests: tests/redteam/test_adviser_rules.py and test_secret_forms.py, one row per shape.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["REDACTED", "Redactor", "secret_name"]

REDACTED = "[REDACTED]"
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|PWD|ACCESS|CREDENTIAL|(?<![A-Z])CREDS?(?![A-Z])|AUTH",
                          re.IGNORECASE)
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})  # the shell's directories, not passwords
MIN_SECRET_CHARS = 6  # shorter values ("1", "true") would blank out half of any text
_PLAIN_VALUE = re.compile(r"(?i)^(?:true|false|none|null|yes|no|on|off|-?\d+(?:\.\d+)?)$")
# A key in a log line or YAML that holds a secret (`max_tokens`, `tokenizer_path`, `pass@4` do not).
_KEY_WORD = (r"(?:api[_-]?key|apikey|access[_-]?key|private[_-]?key|secret|password|passwd|passphrase|credential"
             r"|(?<![a-z])(?:db[_-]?)?pass(?:wd|word)?(?![a-z@])|(?<=[_-])pwd(?![a-z])|(?<![a-z])pwd(?=[_-])|(?<![a-z])access(?![a-z])"
             r"|(?<![a-z])creds?(?![a-z])|(?<![a-z])token(?!s|izer|_?(?:len|num|count|limit|ids?)\b))")
_SECRET_KEY = re.compile(_KEY_WORD, re.IGNORECASE)
_NUMBER_OR_WORD = r"(?!(?:-?\d+(?:\.\d+)?|true|false|null|none)(?![\w.-]))"

_PATTERNS = (
    # PEM blocks (private keys, certificates) inside one text: the whole body.
    re.compile(r"(-----BEGIN [A-Z0-9 ]+-----)[\s\S]*?(?=-----END [A-Z0-9 ]+-----)"),
    # Authorization / Proxy-Authorization headers, whatever the scheme; Cookie / Set-Cookie headers (sessions).
    re.compile(r"(?i)((?:proxy-)?authorization[\"']?\s*[:=]\s*)(?:\"[^\"]*\"|'[^']*'|[^\r\n]*)"),
    re.compile(r"(?i)(\b(?:set-)?cookie[\"']?\s*[:=]\s*)(?:\"[^\"]*\"|'[^']*'|[^\r\n]*)"),
    # -pPASSWORD, attached, as the MySQL/MariaDB clients, sshpass, 7z and unrar take it (within 300 characters
    # of the program's name: bounded, so a line of many `mysql` words stays linear).
    re.compile(r"(?i)(\b(?:mysql\w*|mariadb\w*|sshpass|7za?|unrar|rar)\b[^\r\n]{0,300}?(?<!\S)(?-i:-p))(?!\s)"
               r"(\"[^\"\r\n]*\"|'[^'\r\n]*'|[^\s'\"]+)"),
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=-]{4,}"),
    # key: value / key=value / "key": "value" where the key names a secret.
    # (Tried only where a word starts: from every position inside a long word it was quadratic, 1.4 s for
    # 100 KB of 50-letter words.)
    re.compile(r"(?i)((?<![A-Za-z0-9_.\"'-])[\"']?[A-Za-z0-9_.-]*" + _KEY_WORD + r"[A-Za-z0-9_.-]*[\"']?\s*[:=]\s*)"
               + _NUMBER_OR_WORD + r"(\"[^\"\r\n]*\"|'[^'\r\n]*'|[^\s,}\]\r\n]+)"),
    # --password X / --db-pass X / --api-key X: a command-line option and its value, space-separated.
    re.compile(r"(?i)((?<![\w-])--?[A-Za-z0-9_-]*" + _KEY_WORD + r"[A-Za-z0-9_-]*[ \t]+)" + _NUMBER_OR_WORD
               + r"(?!-)(\"[^\"\r\n]*\"|'[^'\r\n]*'|[^\s\r\n]+)"),
    # JSON Web Tokens: three base64url parts, the first two JSON objects ("eyJ").
    re.compile(r"()\beyJ[A-Za-z0-9_-]{6,}\.eyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}"),
    # Well-known key formats.
    re.compile(r"()\b(?:sk-[A-Za-z0-9_-]{8,}|sk_(?:live|test)_[A-Za-z0-9]{8,}|rk_live_[A-Za-z0-9]{8,}|"
               r"hf_[A-Za-z0-9]{8,}|gh[pousr]_[A-Za-z0-9]{8,}|github_pat_[A-Za-z0-9_]{8,}|glpat-[A-Za-z0-9_-]{8,}|"
               r"xox[abpr]-[A-Za-z0-9-]{8,}|AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{20,}|"
               r"ya29\.[A-Za-z0-9_-]{10,}|npm_[A-Za-z0-9]{20,})"),
    # `swanlab login -k KEY`, `wandb login [--relogin] KEY`, `huggingface-cli login --token X`, `hf auth login`:
    # the key a login command takes (one with a digit, or a long one: `wandb login failed` stays readable).
    re.compile(r"(?i)(\b(?:swanlab|wandb|huggingface-cli|hf)(?:\s+auth)?\s+login\b"
               r"(?:\s+(?:--(?:web-)?host(?:\s+|=)\S+|--?(?!k\b|key\b|api-key\b|token\b|(?:web-)?host\b)[a-z][\w-]*)){0,6}"
               r"\s+(?:(?:-k|--key|--api-key|--token)(?:\s+|=))?)"
               r"(?![-`'\"\[])(?=[^\s`'\"]*\d|[^\s`'\"]{20})([^\s`'\"]{6,})"),
    # user:password@ in URLs (an empty user too: redis://:password@host).
    re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^/\s:@]*:)[^@\s/]+(?=@)"),
)
# One line of a log or YAML that is a PEM body line (64 base64 characters), or the markers around it.
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]+-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]+-----")
_PEM_BODY_LINE = re.compile(r"^\s*[A-Za-z0-9+/]{64}\s*$|^\s*MII[A-Za-z0-9+/]{20,}={0,2}\s*$")


def _worth_hiding(value: str) -> bool:
    """Long enough and not a plain word or number, so replacing it cannot blank out ordinary text."""
    value = value.strip()
    return len(value) >= MIN_SECRET_CHARS and not _PLAIN_VALUE.match(value)


def secret_name(name: str) -> bool:
    """Whether an environment variable's name says its value is a secret."""
    return name.upper() not in _NOT_SECRET_NAMES and bool(_SECRET_NAME.search(name))


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

    def lines(self, lines: Iterable[str]) -> list[str]:
        """Lines of one text (a log), each redacted, and every line of a PEM block (a key printed over
        several lines) blanked; as many lines as given, so line numbers still point at the same lines."""
        out: list[str] = []
        inside = False
        for line in lines:
            begins, ends = bool(_PEM_BEGIN.search(line)), bool(_PEM_END.search(line))
            if inside and not ends:
                out.append(REDACTED)
                continue
            if _PEM_BODY_LINE.match(line) and not begins:
                out.append(REDACTED)  # a body line whose BEGIN was cut off the excerpt
            else:
                out.append(self.text(line))
            inside = (inside or begins) and not ends
        return out

    def data(self, value: Any) -> Any:
        """The same structure with every string (keys included) redacted; a list of strings as lines."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): self._value_under(str(k), v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            if value and all(isinstance(v, str) for v in value):
                return self.lines(value)
            return [self.data(v) for v in value]
        return value

    def _value_under(self, key: str, value: Any) -> Any:
        """A mapping's value: a non-empty string under a key that names a secret is hidden whole."""
        if isinstance(value, str) and value and _SECRET_KEY.search(key):
            return REDACTED
        return self.data(value)
