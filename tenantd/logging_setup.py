"""Logging in `console` or `json` format; extra fields become JSON keys.

Both formatters scrub secrets as a last line of defence: extra fields whose name says
password, token, secret, cookie or authorization are replaced, and JWTs, bearer
credentials and `name=value` pairs of those names are masked inside messages.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}

REDACTED = "[redacted]"
_SENSITIVE_KEY = re.compile(r"pass(word)?|token|secret|cookie|authorization|api_?key", re.I)
_SENSITIVE_TEXT = (
    # JWTs (header.payload.signature, base64url, header starts with {" -> eyJ)
    re.compile(r"eyJ[\w-]{5,}\.[\w-]{5,}\.[\w-]{5,}"),
    # Authorization: Bearer xxx / Basic xxx
    re.compile(r"(?i)\b(bearer|basic)\s+[\w\-.~+/=]{8,}"),
)
_SENSITIVE_PAIR = re.compile(
    r"(?i)\b((?:auth_token|refresh_token|password|passwd|token|secret|api_?key)"
    r"[\"']?\s*[=:]\s*[\"']?)([^\s\"',;&]+)"
)


def redact_text(text: str) -> str:
    for pattern in _SENSITIVE_TEXT:
        text = pattern.sub(REDACTED, text)
    return _SENSITIVE_PAIR.sub(lambda m: m.group(1) + REDACTED, text)


def redact_value(key: str, value: Any) -> Any:
    if _SENSITIVE_KEY.search(key) and not key.endswith(("_id", "_ids")):
        return REDACTED
    if isinstance(value, dict):
        return {k: redact_value(str(k), v) for k, v in value.items()}
    if isinstance(value, str):
        return redact_text(value)
    return value


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {
        key: redact_value(key, value)
        for key, value in record.__dict__.items()
        if key not in _STANDARD and not key.startswith("_")
    }


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact_text(record.getMessage()),
        }
        payload.update(_extras(record))
        if record.exc_info:
            payload["exc"] = redact_text(self.formatException(record.exc_info))
        return json.dumps(payload, default=str)


class ConsoleFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = redact_text(super().format(record))
        extras = _extras(record)
        if extras:
            flat: list[str] = []
            for key, value in extras.items():
                if isinstance(value, dict):
                    flat.extend(f"{k}={v}" for k, v in value.items() if v is not None)
                else:
                    flat.append(f"{key}={value}")
            base = f"{base} [{' '.join(flat)}]"
        return base


class StderrHandler(logging.StreamHandler[Any]):
    """Writes to whatever sys.stderr is at emit time (test runners swap it and close it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


class WarningsAndEvents(logging.Filter):
    """Passes warnings and worse, and the operational events SERVICE.md names (records that
    carry an `event` field, e.g. notifications.web_push.subscription_expired) at any level."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or hasattr(record, "event")


class DatabaseOutage(logging.Filter):
    """A background loop that fails because the database is away (an error marked
    `quiet_in_logs`: tenantd.db.errors.DatabaseUnavailable) logs one warning line, not a
    traceback, and each loop at most once per REPEAT_SECONDS: the pool has said why
    (tenantd.db.core logs the outage and the recovery)."""

    REPEAT_SECONDS = 60.0

    def __init__(self) -> None:
        super().__init__()
        self.last: dict[tuple[str, object], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not getattr(error, "quiet_in_logs", False):
            return True
        now = time.monotonic()
        key = (record.name, record.msg)
        if now - self.last.get(key, -self.REPEAT_SECONDS) < self.REPEAT_SECONDS:
            return False
        self.last[key] = now
        record.exc_info = None
        record.exc_text = None
        record.msg = f"{record.msg}: database unavailable"
        if record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def setup_logging(level: str = "info", fmt: str = "console", *, quiet: bool = False) -> None:
    """Log to stderr at `level`. `quiet` (the CLI's default) keeps only warnings and the
    operational events: a command that delivers inline must still log what SERVICE.md says
    is logged, without the per-request and per-job chatter of info."""
    handler = StderrHandler()
    handler.addFilter(DatabaseOutage())
    if quiet:
        handler.addFilter(WarningsAndEvents())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(ConsoleFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if level.upper() in logging.getLevelNamesMapping() else "INFO")
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # we log our own line
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # one line per tick otherwise
