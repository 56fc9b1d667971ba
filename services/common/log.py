"""structlog set-up: JSON lines in services, a readable console in the CLI."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(fmt: str = "json", level: str = "info", stream=None) -> None:
    renderer = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(stream) if stream else _current_stderr,
        cache_logger_on_first_use=False,
    )


def _current_stderr(*_args: object) -> structlog.PrintLogger:
    # sys.stderr is looked up per logger, not once: a caller that configured logging while stderr was
    # redirected (pytest capture, contextlib.redirect_stderr) must not leave every later log line
    # writing to that closed stream.
    return structlog.PrintLogger(sys.stderr)


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    return structlog.get_logger(name)
