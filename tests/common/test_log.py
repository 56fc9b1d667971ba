import contextlib
import io

import structlog

from services.common.log import configure_logging, get_logger


def test_logging_configured_under_a_redirect_keeps_working_after_it_closes(capsys) -> None:
    # The CLI configures logging in-process; a test that ran it under capture must not leave every later
    # log line writing to the closed capture stream (this failed five unrelated service tests in CI).
    redirected = io.StringIO()
    with contextlib.redirect_stderr(redirected):
        configure_logging("console", "info")
        get_logger("t").info("inside")
    assert "inside" in redirected.getvalue()
    redirected.close()
    try:
        get_logger("t").info("after the redirect closed")
    finally:
        structlog.reset_defaults()
    assert "after the redirect closed" in capsys.readouterr().err
