"""Log lines as plain text or JSON (``AUDITOR_LOG_FORMAT``), with the web request's id and
the Celery task's id on every line written while they run.

The web app sets the request id (:data:`request_id`, from the ``X-Request-ID`` header or a
new one) for the duration of a request; a worker's lines get the id and name of the task
the process is running. Both come from :class:`ContextFilter`, installed on the handlers
:func:`configure_logging` (web processes) and :func:`configure_celery_handlers` (Celery's
own logging set-up, in worker and beat processes) own. Nothing here reads the environment.
"""

from __future__ import annotations

import contextvars
import logging
import sys

from pythonjsonlogger.json import JsonFormatter

__all__ = ["ContextFilter", "JsonLogFormatter", "PlainFormatter", "configure_celery_handlers",
           "configure_logging", "formatter", "request_id"]

#: The id of the web request this thread or task is serving (None outside requests).
request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("auditor_request_id", default=None)

_PLAIN = "%(asctime)s %(levelname)s %(name)s: %(message)s%(context)s"


def _current_task():
    if "celery" not in sys.modules:  # a process without Celery runs no task
        return None
    from celery._state import get_current_task

    return get_current_task()


class ContextFilter(logging.Filter):
    """Adds ``request_id``, ``task_id`` and ``task_name`` (None when not in one) to each record,
    and ``context``, their plain-text form (`` [request=… task=…]`` or nothing)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = request_id.get()
        if getattr(record, "task_id", None) is None:
            task = _current_task()
            request = getattr(task, "request", None) if task is not None else None
            record.task_id = getattr(request, "id", None)
            record.task_name = getattr(task, "name", None) if record.task_id else None
        parts = [f"request={record.request_id}"] if record.request_id else []
        if record.task_id:
            parts.append(f"task={record.task_name}[{record.task_id}]")
        record.context = f" [{' '.join(parts)}]" if parts else ""
        return True


class PlainFormatter(logging.Formatter):
    """``time LEVEL logger: message [request=… task=…]``."""

    def __init__(self) -> None:
        super().__init__(_PLAIN)

    def format(self, record: logging.LogRecord) -> str:
        if not hasattr(record, "context"):
            ContextFilter().filter(record)
        return super().format(record)


class JsonLogFormatter(JsonFormatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message``, the ids that are
    set, ``exc_info`` for an exception, and any ``extra={...}`` fields."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s %(message)s", rename_fields={"levelname": "level", "name": "logger"},
                         timestamp="time", reserved_attrs=[*_RESERVED, "context"])

    def process_log_record(self, log_data):
        for key in ("request_id", "task_id", "task_name"):
            if log_data.get(key) is None:
                log_data.pop(key, None)
        return log_data

    def format(self, record: logging.LogRecord) -> str:
        if not hasattr(record, "context"):
            ContextFilter().filter(record)
        return super().format(record)


# The standard LogRecord attributes python-json-logger leaves out unless named in the format.
_RESERVED = [
    "args", "asctime", "created", "exc_info", "exc_text", "filename", "funcName", "levelname", "levelno",
    "lineno", "module", "msecs", "message", "msg", "name", "pathname", "process", "processName",
    "relativeCreated", "stack_info", "thread", "threadName", "taskName",
]


def formatter(fmt: str) -> logging.Formatter:
    """The formatter of ``AUDITOR_LOG_FORMAT`` (``plain`` or ``json``)."""
    if fmt == "json":
        return JsonLogFormatter()
    if fmt == "plain":
        return PlainFormatter()
    raise ValueError(f"log format must be 'plain' or 'json'; got {fmt!r}")


class _AuditorHandler(logging.StreamHandler):
    """The handler :func:`configure_logging` installs (found again by its class)."""


def configure_logging(fmt: str, *, level: int = logging.INFO, force: bool = False) -> bool:
    """Log the root logger's records to stderr in ``fmt``, with the ids.

    Done only where nobody configured logging (the root logger has no handler), or
    again where this function did it before (to change the format); ``force`` adds the
    handler anyway. Returns whether it configured. The root level is lowered to ``level``
    when it is above it.
    """
    root = logging.getLogger()
    ours = [h for h in root.handlers if isinstance(h, _AuditorHandler)]
    if not ours and root.handlers and not force:
        return False
    handler = ours[0] if ours else _AuditorHandler(sys.stderr)
    handler.setFormatter(formatter(fmt))
    if not any(isinstance(f, ContextFilter) for f in handler.filters):
        handler.addFilter(ContextFilter())
    if not ours:
        root.addHandler(handler)
    if root.getEffectiveLevel() > level:
        root.setLevel(level)
    return True


def configure_celery_handlers(logger: logging.Logger, fmt: str) -> None:
    """Give the handlers Celery set up on ``logger`` the ids, and in json format our formatter
    (plain keeps Celery's own format, which names the task of task loggers)."""
    for handler in logger.handlers:
        if not any(isinstance(f, ContextFilter) for f in handler.filters):
            handler.addFilter(ContextFilter())
        if fmt == "json":
            handler.setFormatter(JsonLogFormatter())
