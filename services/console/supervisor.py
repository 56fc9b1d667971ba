"""Keeps an embedded stack up: restarts a service that exits (with backoff and a restart count), and a
nats-server that died (on the same port, with the same store, so every service reconnects by itself).
Gives up, and says so, when one of them keeps dying: `polymorph up` then exits non-zero so that the
machine's own supervisor (systemd, a container runtime) sees the failure.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from services.common.log import get_logger
from services.console.stack import Stack

log = get_logger("supervisor")


class GaveUp(RuntimeError):
    pass


@dataclass
class Supervisor:
    stack: Stack
    max_restarts: int = 5  # per process within `window_s`
    window_s: float = 300.0
    backoff_s: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)
    restarts: dict[str, int] = field(default_factory=dict)  # process → restarts so far
    _recent: dict[str, deque[float]] = field(default_factory=dict)
    _due: dict[str, float] = field(default_factory=dict)  # process → when its restart is due

    def tick(self) -> list[str]:
        """Restart what is dead and due; returns what was restarted. Raises GaveUp."""
        now = time.monotonic()
        done = []
        if not self.stack.nats_alive() and self._schedule("nats-server", now):
            self.stack.restart_nats()
            done.append("nats-server")
        for name, code in self.stack.dead_services().items():
            if self._schedule(name, now, code):
                self.stack.start_service(name)
                done.append(name)
        return done

    def _schedule(self, name: str, now: float, code: int | None = None) -> bool:
        """True when the restart is due now (the first time it is seen dead, a backoff is set)."""
        if name not in self._due:
            recent = self._recent.setdefault(name, deque())
            while recent and now - recent[0] > self.window_s:
                recent.popleft()
            if len(recent) >= self.max_restarts:
                raise GaveUp(f"{name} died {len(recent) + 1} times within {self.window_s:.0f} s; giving up")
            delay = self.backoff_s[min(len(recent), len(self.backoff_s) - 1)]
            self._due[name] = now + delay
            log.warning("process exited; restarting", process=name, exit_code=code, in_s=delay,
                        restarts=self.restarts.get(name, 0))
        if now < self._due[name]:
            return False
        del self._due[name]
        self._recent[name].append(now)
        self.restarts[name] = self.restarts.get(name, 0) + 1
        return True
