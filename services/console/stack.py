"""The embedded stack: one nats-server and the five services as child processes on one machine.

Used by `polymorph up`, `polymorph demo` and the integration tests (which SIGKILL and restart
single services through it). The server authenticates every client: each service connects as its own
identity (services/common/identities.py) with credentials generated under the data dir; `nats_url`
is the operator's (what the CLI uses), `url_for(identity)` any other's. `endpoints()` says where the
server's HTTP monitoring and each running service's Prometheus /metrics are.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from services.common import identities, metrics, subjects
from services.common.config import Env
from services.common.identities import Credentials
from services.common.nats_server import EmbeddedNats
from services.common.tls import TlsSettings

SERVICES = ("registry", "engine_host", "verifier", "agent_pool", "traffic_profiler")


@dataclass
class Stack:
    data_dir: Path
    extra_env: Mapping[str, str] = field(default_factory=dict)
    services: tuple[str, ...] = SERVICES
    nats: EmbeddedNats | None = None
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    credentials: dict[str, Credentials] = field(default_factory=dict)
    port: int = 0  # NATS port: 0 = POLYMORPH_NATS_PORT, else 4222 when free, else any free port (-1)
    # NATS HTTP monitoring, 127.0.0.1 only: 0 = any free port when `port` is -1, else
    # POLYMORPH_NATS_MONITOR_PORT, else 8222 when free, else any free port
    monitor_port: int = 0

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir).resolve()  # absolute: services and sandboxes run elsewhere

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def url_file(self) -> Path:
        return self.data_dir / "nats.url"

    @property
    def credentials_dir(self) -> Path:
        return self.data_dir / "nats" / "credentials"

    @property
    def nats_url(self) -> str:
        """The operator's URL (SQL, export, campaigns, discovery): what the CLI talks to."""
        return self.url_for("operator")

    def url_for(self, identity: str) -> str:
        assert self.nats is not None, "stack not started"
        return identities.with_credentials(self.nats.url, self.credentials[identity])

    @property
    def tls(self) -> TlsSettings | None:
        """POLYMORPH_TLS_* from this process's environment or the stack's extra settings."""
        return TlsSettings.from_env(Env({**os.environ, **self.extra_env}))

    def service_env(self, name: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            POLYMORPH_NATS_URL=self.url_for(name),
            POLYMORPH_DATA_DIR=str(self.data_dir),
            POLYMORPH_LOG_FORMAT="json",
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        return env

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        self.credentials = identities.generate(self.credentials_dir)
        _drop_legacy_streams(self.data_dir / "nats")
        monitor = self.monitor_port or (-1 if self.port == -1 else 0)
        self.nats = EmbeddedNats(self.data_dir / "nats", credentials=self.credentials, port=_choose_port(self.port),
                                 monitor_port=_choose_port(monitor, "POLYMORPH_NATS_MONITOR_PORT", 8222),
                                 tls=self.tls)
        self.nats.start()
        # a restarted server comes back on these
        self.port = int(self.nats.url.rsplit(":", 1)[1])
        self.monitor_port = int(self.nats.monitor_url.rsplit(":", 1)[1])
        fd = os.open(self.url_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds a password
        with os.fdopen(fd, "w") as f:
            f.write(self.nats_url)
        for name in self.services:
            self.start_service(name)

    def start_service(self, name: str) -> subprocess.Popen:
        metrics.url_file(self.data_dir, name).unlink(missing_ok=True)  # what is there next is this process's
        with open(self.log_dir / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", f"services.{name}"],
                env=self.service_env(name),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in a terminal reaches us, and we stop children in order
            )
        self.processes[name] = proc
        return proc

    def endpoints(self) -> dict[str, str]:
        """Where to look: the server's HTTP monitoring and the /metrics of every service that is up."""
        found = {"nats-server": self.nats.monitor_url} if self.nats is not None else {}
        for name in self.services:
            with contextlib.suppress(FileNotFoundError):  # not up (yet)
                found[name] = metrics.url_file(self.data_dir, name).read_text().strip()
        return found

    def nats_alive(self) -> bool:
        return self.nats is not None and self.nats.process is not None and self.nats.process.poll() is None

    def restart_nats(self) -> None:
        """The same port and store: services reconnect by themselves (they retry forever)."""
        assert self.nats is not None
        self.nats.stop()
        fresh = EmbeddedNats(self.data_dir / "nats", credentials=self.credentials, port=self.port,
                             monitor_port=self.monitor_port, tls=self.tls)
        fresh.start()
        # swapped in only once it listens: the supervisor restarts it on another thread, and a reader of
        # `nats_url` in between would get the URL of a server that has not said its port yet
        self.nats = fresh

    def kill_service(self, name: str) -> None:
        """SIGKILL: no drain, no goodbye — what a crash or OOM kill looks like."""
        proc = self.processes[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def restart_service(self, name: str) -> subprocess.Popen:
        proc = self.processes.get(name)
        if proc is not None and proc.poll() is None:
            self.kill_service(name)
        return self.start_service(name)

    def dead_services(self) -> dict[str, int]:
        return {n: p.returncode for n, p in self.processes.items() if p.poll() is not None}

    def stop(self, timeout_s: float = 20.0) -> None:
        # Producers first would be nicer, but every service drains on SIGTERM, so order matters little.
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in self.processes.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for name in self.services:  # a killed one could not remove its own
            metrics.url_file(self.data_dir, name).unlink(missing_ok=True)
        self.processes.clear()
        if self.nats is not None:
            self.nats.stop()
            self.nats = None
        self.url_file.unlink(missing_ok=True)

    def __enter__(self) -> Stack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _choose_port(requested: int, variable: str = "POLYMORPH_NATS_PORT", standard: int = 4222) -> int:
    """The port asked for (or `variable`), else the standard one when it is free, else -1 (any)."""
    import socket

    if requested:
        return requested
    env = os.environ.get(variable, "")
    if env:
        return int(env)
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", standard))
        except OSError:
            return -1
    return standard


def _drop_legacy_streams(nats_dir: Path) -> None:
    """A data dir from before the streams were split by publisher holds one LOOP stream whose subjects
    overlap them all: its events are stored in the registry already; the stream goes."""
    import shutil

    for legacy in subjects.LEGACY_STREAMS:
        shutil.rmtree(nats_dir / "js" / "$G" / "streams" / legacy, ignore_errors=True)


def resolve_nats_url(explicit: str | None, data_dir: Path, identity: str = "operator") -> str:
    """The URL a CLI command talks to: --nats, POLYMORPH_NATS_URL, or a running `polymorph up` in
    `data_dir` (as `identity`: the operator, or `traffic` for a replay)."""
    if explicit:
        return explicit
    url_file = data_dir / "nats.url"
    if url_file.exists():
        url = url_file.read_text().strip()
        creds = data_dir / "nats" / "credentials" / f"{identity}.json"
        if identity != "operator" and creds.exists():
            data = json.loads(creds.read_text())
            url = identities.with_credentials(url, Credentials(data["user"], data["password"]))
        return url
    return "nats://127.0.0.1:4222"
