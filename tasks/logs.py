"""Structured log lines: every toolsafe record carries a stable ``event`` field.

``TOOLSAFE_LOG_FORMAT=json`` makes workers print one JSON object per line with the
record's extra fields (``event``, ``operation_ref``, ...), for log shippers.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Final

# Attributes every LogRecord has; anything else was passed through ``extra``.
_STANDARD: Final = frozenset(
    logging.LogRecord("", 0, "", 0, "", None, None).__dict__.keys()
    | {"message", "asctime", "taskName"}
)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "at": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "event": getattr(record, "event", "log"),
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in data:
                data[key] = value if isinstance(value, str | int | float | bool) else str(value)
        if record.exc_info and record.exc_info[0] is not None:
            # The exception type only: tracebacks may hold customer data.
            data["exception"] = record.exc_info[0].__name__
        return json.dumps(data, ensure_ascii=False)
