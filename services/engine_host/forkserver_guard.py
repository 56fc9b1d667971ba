"""Imported first by the sandboxes' fork server (sandboxes.sandbox_context): it must not be readable
by what it forks (a non-dumpable process's /proc entries — root, cwd, fd, mem — are closed to
processes without CAP_SYS_PTRACE, which sandboxes drop), and it dies with the harness."""

from __future__ import annotations

import ctypes
import signal

_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE = 1, 4

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
_libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
