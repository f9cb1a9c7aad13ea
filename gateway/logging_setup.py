"""How ``tidegate`` prints its log: text lines, or one JSON object a line
(``--log-format json``) for log shippers that parse fields instead of text."""

from __future__ import annotations

import datetime
import json
import logging

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FORMATS = ("text", "json")
#: kazoo logs each attempt to reach ZooKeeper (a few a second while it is unreachable):
#: the same line is printed once in this long.
KAZOO_REPEAT_S = 30.0


class RepeatFilter(logging.Filter):
    """Drops a record whose message (its format, before arguments) was let through
    less than ``every_s`` ago."""

    def __init__(self, every_s: float) -> None:
        super().__init__()
        self.every_s = every_s
        self._last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = str(record.msg)
        if record.created - self._last.get(key, -self.every_s) < self.every_s:
            return False
        if len(self._last) >= 256:  # bounded: formats are few, never per-call text
            self._last.clear()
        self._last[key] = record.created
        return True


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message"}``, plus ``exception`` with its traceback
    when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure(level: str, fmt: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
    logging.getLogger("kazoo.client").addFilter(RepeatFilter(KAZOO_REPEAT_S))
