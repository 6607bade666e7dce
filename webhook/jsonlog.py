"""Structured logs: one JSON object per line on stderr, and one line per admission decision.

    {"time": "...", "level": "info", "logger": "mlgate.decision", "msg": "admission", "uid": "...",
     "endpoint": "validate", "operation": "CREATE", "kind": "PyTorchJob", "namespace": "ml", "name": "mnist",
     "verdict": "denied", "dryRun": false, "rules": ["gpu/gpu.max=fail"], "messages": ["[gpu/gpu.max] ..."],
     "durationMs": 0.41}
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
from typing import Any

import orjson

from mlgate.kube.reach import quiet_retries

from .review import Admission

DECISIONS = logging.getLogger("mlgate.decision")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def configure(level: str = "info") -> None:
    """JSON lines on stderr for mlgate's and uvicorn's loggers."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    quiet_retries()
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # The JSON lines carry none of the caller, thread or process fields, so skip collecting them
    # for every record (the "Optimization" switches of the logging docs).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def log_decision(admission: Admission, endpoint: str, seconds: float) -> None:
    if not DECISIONS.isEnabledFor(logging.INFO):
        return
    request = admission.request
    fields = {
        "uid": request.uid, "endpoint": endpoint, "operation": request.operation, "kind": request.kind,
        "namespace": request.namespace, "name": request.name, "verdict": admission.verdict,
        "dryRun": request.dry_run, "rules": [f"{r.policy}/{r.rule}={r.outcome.value}" for r in admission.results],
        "durationMs": round(seconds * 1000, 3),
    }
    if admission.messages:
        fields["messages"] = admission.messages
    DECISIONS.info("admission", extra={"fields": fields})


def log_rejected(endpoint: str, status: int, message: str, seconds: float) -> None:
    DECISIONS.info("rejected", extra={"fields": {"endpoint": endpoint, "status": status, "error": message,
                                                 "durationMs": round(seconds * 1000, 3)}})
