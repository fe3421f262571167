"""The optional LLM repair adviser: asked when neither the catalogue nor the site hook has a plan.

It talks to any OpenAI-compatible `/v1/chat/completions` endpoint (vLLM, Ollama, a hosted API)
with httpx: JSON mode (`response_format`) when the endpoint offers it, a hard deadline for the
whole exchange, no redirects (the key goes to the configured URL only) and no proxy from the
environment. What it sends is redacted (ajet_runner.statemachine.failures.redact); what it answers is
validated (ajet_runner.statemachine.fixes.advice) and becomes ordinary repair actions, or is refused
with the reason. A stop wins over an ask: `cancelled` is polled while the request is in flight
and aborts it at once (the request is a task on its own event loop, cancelled with its connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ajet_runner.statemachine.durations import format_duration
from ajet_runner.statemachine.failures.redact import Redactor
from ajet_runner.statemachine.fixes.advice import (
    AdviceError,
    AdviceRules,
    AdvisorAnswer,
    describe_change,
    parse_answer,
    to_actions,
    validate_changes,
)
from ajet_runner.statemachine.fixes.advice_context import build_messages, error_window
from ajet_runner.statemachine.lifecycle import EventType
from ajet_runner.statemachine.models import Blueprint, RepairAction
from ajet_runner.statemachine.shell import command as cmdlib
from ajet_runner.store.records import Context, RepairRecord
from ajet_runner.workers.repair.config_patch import read_yaml_data

log = logging.getLogger(__name__)

LOG_TAIL_BYTES = 2 * 1024 * 1024
MAX_RESPONSE_BYTES = 1024 * 1024


CANCEL_POLL_SECONDS = 0.05  # how often an ask in flight looks at the stop request


class AdviserUnavailable(RuntimeError):
    """No usable answer came back (HTTP error, timeout, not an OpenAI-shaped response)."""


class AskCancelled(RuntimeError):
    """A stop was requested while the ask was in flight: it was aborted, its answer will not be used."""


Cancelled = Callable[[], bool]


def endpoint_url(url: str) -> str:
    """`.../chat/completions` for a base URL (`http://h:8000`, `http://h:8000/v1`) or a full one."""
    url = url.strip().rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    if url.endswith("/v1"):
        return url + "/chat/completions"
    return url + "/v1/chat/completions"


@dataclass(frozen=True)
class AdviserConfig:
    """The adviser's settings (from AJET_RUNNER_LLM_*). The key is read when asking, never stored in logs."""

    url: str
    model: str = ""
    api_key: str = ""
    api_key_file: str = ""
    timeout: float = 120.0
    max_asks: int = 2
    prefixes: tuple[str, ...] = ("proxychains4 -q",)
    json_mode: bool = True

    def __repr__(self) -> str:  # the key never appears in a log line or a traceback
        return f"AdviserConfig(url={self.url!r}, model={self.model!r}, timeout={self.timeout})"

    @classmethod
    def from_settings(cls, settings: Any) -> AdviserConfig | None:
        """None when the adviser is off (no AJET_RUNNER_LLM_URL)."""
        if not settings.llm_url:
            return None
        return cls(
            url=settings.llm_url, model=settings.llm_model,
            api_key=settings.llm_api_key.get_secret_value(), api_key_file=settings.llm_api_key_file,
            timeout=settings.llm_timeout_seconds, max_asks=settings.llm_max_asks,
            prefixes=tuple(p.strip() for p in settings.llm_prefixes.split(",") if p.strip()),
            json_mode=settings.llm_json_mode,
        )

    @property
    def label(self) -> str:
        return self.model or "the configured model"

    def key(self) -> str:
        """The API key: the variable, else the first line of the file (re-read, so it can rotate)."""
        if self.api_key:
            return self.api_key.strip()
        if self.api_key_file:
            try:
                lines = Path(self.api_key_file).read_text(encoding="utf-8").splitlines()
            except OSError as exc:
                raise AdviserUnavailable(f"cannot read AJET_RUNNER_LLM_API_KEY_FILE: {exc.strerror}") from None
            return lines[0].strip() if lines else ""
        return ""


def chat(cfg: AdviserConfig, messages: list[dict[str, str]], *, deadline: float,
         cancelled: Cancelled | None = None) -> tuple[str, str]:
    """POST the messages; (the answer's text, the model that answered). Raises AdviserUnavailable, or
    AskCancelled as soon as `cancelled()` is true."""
    key = cfg.key()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    body: dict[str, Any] = {"messages": messages, "temperature": 0, **({"model": cfg.model} if cfg.model else {})}
    modes = [True, False] if cfg.json_mode else [False]
    for json_mode in modes:
        payload = {**body, "response_format": {"type": "json_object"}} if json_mode else body
        status, data = _post(endpoint_url(cfg.url), headers, payload, deadline, cancelled)
        if status in (400, 404, 415, 422, 501) and json_mode:
            log.info("the adviser endpoint refused JSON mode (HTTP %s); asking without it", status)
            continue  # an endpoint without response_format support: the prompt still asks for JSON
        if status != 200:
            raise AdviserUnavailable(f"the endpoint answered HTTP {status}: {data[:300]!r}")
        return _completion(data, cfg.model)
    raise AdviserUnavailable("the endpoint refused the request")


def _completion(data: str, asked_model: str) -> tuple[str, str]:
    """A chat completion's text and the model that answered (as it names itself, else the one asked for);
    AdviserUnavailable when it is no OpenAI-compatible completion with text."""
    try:
        answer = json.loads(data)
        content = answer["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise AdviserUnavailable(f"not an OpenAI-compatible chat completion: {exc!r}") from None
    if not isinstance(content, str):
        raise AdviserUnavailable("the completion has no text content")
    return content, str(answer.get("model") or asked_model or "unknown model")


def _post(url: str, headers: dict[str, str], payload: dict[str, Any], deadline: float,
          cancelled: Cancelled | None = None) -> tuple[int, str]:
    """One POST with a hard deadline; aborted within CANCEL_POLL_SECONDS once `cancelled()` says so."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise AdviserUnavailable("timed out before asking")
    if cancelled is not None and cancelled():
        raise AskCancelled("a stop was requested before asking")
    return asyncio.run(_race(_post_async(url, headers, payload, deadline, left), cancelled))


async def _race(request: Any, cancelled: Cancelled | None) -> tuple[int, str]:
    """Await the request, or cancel it (closing its connection) the moment `cancelled()` is true."""
    task = asyncio.ensure_future(request)
    if cancelled is None:
        return await task
    while not task.done():
        if cancelled():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            raise AskCancelled("a stop was requested while the adviser was asked")
        await asyncio.wait({task}, timeout=CANCEL_POLL_SECONDS)
    return task.result()


async def _post_async(url: str, headers: dict[str, str], payload: dict[str, Any], deadline: float,
                      left: float) -> tuple[int, str]:
    import httpx  # here: the node's watcher imports this module at its start, and httpx (with its CLI) cost it ~0.2 s

    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(left), follow_redirects=False, trust_env=False) as client, \
                client.stream("POST", url, headers=headers, content=json.dumps(payload)) as resp:
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.aiter_bytes():
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise AdviserUnavailable(f"the answer is larger than {MAX_RESPONSE_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise AdviserUnavailable("timed out while reading the answer")
                chunks.append(chunk)
            return resp.status_code, b"".join(chunks).decode("utf-8", "replace")
    except httpx.TimeoutException:
        raise AdviserUnavailable("timed out waiting for the answer") from None
    except httpx.HTTPError as exc:
        raise AdviserUnavailable(f"could not reach the endpoint: {type(exc).__name__}: {exc}") from None


def read_log_tail(path: str, limit: int = LOG_TAIL_BYTES) -> list[str]:
    """The log's last `limit` bytes as lines (the first, partial line dropped when cut)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            data = fh.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[1:] if size > limit and lines else lines


@dataclass
class AdviceResult:
    """What one ask produced: actions to resolve (maybe none), the reason, and what to record."""

    actions: list[RepairAction]
    why: str
    record: dict[str, Any]


def ask(cfg: AdviserConfig, *, bp: Blueprint, ctx: Context, pending: Mapping[str, Any],
        publish: Callable[[dict[str, Any]], None], env: Mapping[str, str] | None = None,
        cancelled: Cancelled | None = None) -> AdviceResult:
    """Ask once: build the redacted context, call the endpoint, validate the answer. Never raises; a stop
    (`cancelled()`) aborts the ask at once and the result says so (`record["advice_result"] == "cancelled"`)."""
    env = os.environ if env is None else env
    started = time.monotonic()
    asked_at = time.time()
    record: dict[str, Any] = {"advised_by": cfg.label, "advice_result": "no answer",
                              "signature_text": str((pending.get("cause") or {}).get("text") or "")}
    publish({"type": EventType.adviser, "status": "asking", "model": cfg.label, "ask": ctx.advice_asks})
    try:
        messages = _messages(cfg, bp=bp, ctx=ctx, pending=pending, env=env)
        text, model = chat(cfg, messages, deadline=started + cfg.timeout, cancelled=cancelled)
        record["advised_by"] = cfg.model or model
        answer = parse_answer(text)
    except AskCancelled as exc:
        return _cancelled(record, exc, started, asked_at, publish)
    except (AdviserUnavailable, AdviceError) as exc:
        kind = "gave no usable answer" if isinstance(exc, AdviserUnavailable) else "answer refused"
        record["advice_result"] = "no answer" if isinstance(exc, AdviserUnavailable) else "refused"
        record["refused"] = [str(exc)]
        return _done(record, [], f"adviser ({record['advised_by']}) {kind}: {exc}", started, asked_at, publish)
    return _judged(cfg, ctx, record, answer, started, asked_at, publish)


def _judged(cfg: AdviserConfig, ctx: Context, record: dict[str, Any], answer: AdvisorAnswer, started: float,
            asked_at: float, publish: Callable[[dict[str, Any]], None]) -> AdviceResult:
    """An answer that parsed: declined (no fix), refused (a change the rules forbid), or advised (actions)."""
    record.update(rationale=answer.rationale, advice_diagnosis=answer.diagnosis,
                  advice_changes=[c.model_dump() for c in answer.changes],
                  advice=[describe_change(c) for c in answer.changes])
    if not answer.repairable or not answer.changes:
        record["advice_result"] = "declined"
        why = f"adviser ({record['advised_by']}) found no fix: {answer.diagnosis}"
        return _done(record, [], why, started, asked_at, publish)
    problems = validate_changes(answer.changes, _rules(cfg, ctx))
    if problems:
        record.update(advice_result="refused", refused=problems)
        why = f"adviser ({record['advised_by']}) answer refused: " + "; ".join(problems)
        return _done(record, [], why, started, asked_at, publish)
    record["advice_result"] = "advised"
    actions = to_actions(answer.changes, f"advised by {record['advised_by']}")
    return _done(record, actions, f"advised by {record['advised_by']}: {answer.diagnosis}", started, asked_at,
                 publish)


def _cancelled(record: dict[str, Any], exc: AskCancelled, started: float, asked_at: float,
               publish: Callable[[dict[str, Any]], None]) -> AdviceResult:
    """A stop aborted the ask: no actions, and the record and an event say after how long."""
    record.update(advice_result="cancelled", refused=[str(exc)])
    seconds = round(time.monotonic() - started, 3)
    record["advice_seconds"] = seconds
    publish({"type": EventType.adviser, "status": "cancelled", "model": record["advised_by"], "asked_at": asked_at,
             "seconds": seconds, "message": f"ask aborted after {format_duration(seconds)}: {exc}"})
    return AdviceResult(actions=[], why=f"adviser ({record['advised_by']}) not heard: {exc}", record=record)


def _done(record: dict[str, Any], actions: list[RepairAction], why: str, started: float, asked_at: float,
          publish: Callable[[dict[str, Any]], None]) -> AdviceResult:
    seconds = round(time.monotonic() - started, 3)
    record["advice_seconds"] = seconds
    publish({"type": EventType.adviser, "status": "answered", "model": record["advised_by"], "asked_at": asked_at,
             "seconds": seconds, "result": record["advice_result"], "message": why[:1000]})
    log.info("adviser %s answered in %s: %s", record["advised_by"], format_duration(seconds),
             record["advice_result"])
    return AdviceResult(actions=actions, why=why, record=record)


def _rules(cfg: AdviserConfig, ctx: Context) -> AdviceRules:
    try:
        data = read_yaml_data(Path(ctx.config_path)) if ctx.config_path else {}
    except (OSError, ValueError):
        data = {}
    protected = {str(c.get("key")): str(c.get("reason") or "preflight") for c in ctx.preflight_changes
                 if str(c.get("key", "")).startswith("ajet.")}
    return AdviceRules(yaml_data=data, protected_keys=protected, prefixes=cfg.prefixes,
                       has_launcher=cmdlib.launcher_segment(ctx.command) is not None)


def _messages(cfg: AdviserConfig, *, bp: Blueprint, ctx: Context, pending: Mapping[str, Any],
              env: Mapping[str, str]) -> list[dict[str, str]]:
    lines, first = error_window(_log_lines(ctx, pending), anchor=str((pending.get("cause") or {}).get("text") or ""))
    yaml_text = _yaml_text(ctx)
    cause = dict(pending.get("cause") or {})
    cause.pop("repair", None)
    redactor = Redactor(envs=[env, ctx.env], extra=[cfg.key()])
    return build_messages(
        blueprint=bp.public(), diagnosis=cause or None, reason=str(pending.get("reason") or ""),
        log_lines=lines, first_error=first, yaml_text=yaml_text, command=ctx.command,
        attempts=[a.model_dump(mode="json") for a in ctx.attempts],
        repairs=[r.model_dump(mode="json") for r in ctx.repairs], prefixes=cfg.prefixes, redactor=redactor,
    )


def _log_lines(ctx: Context, pending: Mapping[str, Any]) -> list[str]:
    """The last attempt's log tail read from its file, else the tail the failure kept."""
    log_path = ctx.attempts[-1].log_path if ctx.attempts else ""
    return read_log_tail(log_path) if log_path else list(pending.get("log_tail") or [])


def _yaml_text(ctx: Context) -> str:
    """The YAML as run, or a line saying why it could not be read ("" without one)."""
    try:
        return Path(ctx.config_path).read_text(encoding="utf-8") if ctx.config_path else ""
    except OSError as exc:
        return f"(cannot read {ctx.config_path}: {exc.strerror})"


def advice_source(settings: Any, *, bp: Blueprint, ctx: Context, pending: dict[str, Any], budget_left: bool,
                  publish: Callable[[dict[str, Any]], None], cancelled: Cancelled | None = None,
                  ) -> Callable[[], tuple[list[RepairAction], str] | None]:
    """The adviser as a repair-plan source for `plan_repair`; it returns None when it is not asked.

    Not asked when it is off, when this experiment used its asks, when the repair budget is
    spent (an answer could not be used), or once a stop was requested (`cancelled()`, which also
    aborts an ask in flight). An ask's details go to `pending["advice"]` for the record.
    """

    def advise() -> tuple[list[RepairAction], str] | None:
        cfg = AdviserConfig.from_settings(settings)
        if cfg is None or (cancelled is not None and cancelled()):
            return None
        if ctx.advice_asks >= cfg.max_asks or not budget_left:
            why = (f"already asked {ctx.advice_asks} time(s) (AJET_RUNNER_LLM_MAX_ASKS={cfg.max_asks})"
                   if budget_left else "the repair budget is spent")
            publish({"type": EventType.adviser, "status": "not asked", "model": cfg.label, "message": why})
            return None
        ctx.advice_asks += 1
        try:
            result = ask(cfg, bp=bp, ctx=ctx, pending=pending, publish=publish, cancelled=cancelled)
        except Exception as exc:  # an adviser bug must not keep the run from finishing
            log.exception("the adviser failed")
            result = AdviceResult([], f"adviser ({cfg.label}) failed: {type(exc).__name__}: {exc}",
                                  {"advised_by": cfg.label, "advice_result": "no answer", "refused": [str(exc)]})
        pending["advice"] = result.record
        return result.actions, result.why

    return advise


def advice_fields(pending: Mapping[str, Any]) -> dict[str, Any]:
    """The repair record's adviser fields for this failure (empty when the adviser was not asked)."""
    return dict(pending.get("advice") or {})


def advised_stat(record: RepairRecord) -> tuple[str, str] | None:
    """(model, result) for ajet_runner_advised_repairs_total, or None for a repair not from the adviser."""
    if record.source != "adviser":
        return None
    result = record.advice_result or "no answer"
    if result == "advised":
        result = str(record.result) or "advised"
    return (record.advised_by or "unknown", result)
