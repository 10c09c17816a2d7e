"""Logging for `phalanx run`: Kopf's plain format, or one JSON object per line. A webhook's denial is bad
input refused at the boundary, as designed: said at INFO, not as Kopf's ERROR for a failed handler."""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

import kopf

# Attributes every LogRecord has; anything else on a record came from `extra=` and is logged as a field.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}
_HIDDEN = {"settings", "k8s_skip"}  # Kopf's internals


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "message", ...extra fields}`; Kopf's object reference as `object`."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key in _STANDARD or key in _HIDDEN or key in entry:
                continue
            entry["object" if key == "k8s_ref" else key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class DenialsAtInfo(logging.Filter):
    """Kopf logs every AdmissionError a webhook raises as `Webhook 'id' failed permanently: ...` at ERROR;
    for Phalanx that is a denial (the request was refused with its message), not a failure."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and not record.exc_info:
            message = record.getMessage()
            if message.startswith("Webhook ") and " failed permanently: " in message:
                record.msg, record.args = message.replace(" failed permanently: ", " denied: ", 1), ()
                record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def configure(log_format: str, verbose: bool) -> None:
    """Kopf's handler on the root logger, with our JSON formatter when asked (Kopf's records too)."""
    if log_format == "json":
        kopf.configure(verbose=verbose, log_format=kopf.LogFormat.JSON)
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonFormatter())
    else:
        kopf.configure(verbose=verbose, log_format=kopf.LogFormat.FULL)
    if not verbose:
        # Kopf reports every watch event it handled; our own loggers say what matters.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    objects = logging.getLogger("kopf.objects")
    if not any(isinstance(f, DenialsAtInfo) for f in objects.filters):
        objects.addFilter(DenialsAtInfo())
    # aiohttp's access log of /metrics and /healthz scrapes would drown everything else.
    logging.getLogger("aiohttp.access").setLevel(logging.DEBUG if verbose else logging.WARNING)
