"""One rich Console for the CLI: the terminal's width, or a readable 140 columns when piped."""

from __future__ import annotations

import sys

from rich.console import Console


def make_console() -> Console:
    return Console(width=None if sys.stdout.isatty() else 140)
