"""Logging set-up for the command line: readable text or one JSON object per line.

Every soloist record carries a ``component`` (``agent-orchestrator``, ``cluster-semaphore``,
``subagent``, ``store``...), and handoff records a ``skill``; the JSON format keeps them as
fields so a log pipeline can filter on them.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Literal

__all__ = ["JsonFormatter", "configure_logging", "LogFormat"]

LogFormat = Literal["text", "json"]
_FIELDS = ("component", "orchestrator", "skill", "scope", "run")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, soloist fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in _FIELDS:
            value = getattr(record, field, None)
            if value is not None:
                payload[field] = value
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = " ".join(f"{f}={getattr(record, f)}" for f in _FIELDS if getattr(record, f, None) is not None)
        return f"{line} [{extras}]" if extras else line


def configure_logging(fmt: LogFormat = "text", level: str = "WARNING") -> None:
    """Send soloist's logs to stderr in ``fmt`` at ``level`` (other libraries stay quiet)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else _TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("soloist", "actors", "cluster", "coordinators"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False
