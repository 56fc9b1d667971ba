"""TLS for NATS and gRPC, from three settings: POLYMORPH_TLS_CA (the CA that signed the servers'
certificates), POLYMORPH_TLS_CERT and POLYMORPH_TLS_KEY (this machine's server certificate and key).

Set, the embedded nats-server and the engine host's gRPC server require TLS with that certificate,
and every client (services, CLI) verifies the server against the CA, host name or IP included (the
certificate must name 127.0.0.1 / the host the URLs use). Unset, both speak plain text: on one machine
with the loopback interface only, as `polymorph up` binds by default.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from services.common.config import ConfigError, Env


@dataclass(frozen=True)
class TlsSettings:
    ca: Path
    cert: Path
    key: Path

    @classmethod
    def from_env(cls, env: Env | None = None) -> TlsSettings | None:
        env = env or Env.current()
        names = ("TLS_CA", "TLS_CERT", "TLS_KEY")
        values = [env.optional(n) for n in names]
        if not any(values):
            return None
        missing = [f"POLYMORPH_{n}" for n, v in zip(names, values, strict=True) if not v]
        if missing:
            raise ConfigError(f"TLS needs all of POLYMORPH_TLS_CA, _CERT and _KEY; missing {missing}")
        paths = [Path(v).resolve() for v in values if v]
        absent = [str(p) for p in paths if not p.is_file()]
        if absent:
            raise ConfigError(f"TLS files not found: {absent}")
        return cls(*paths)

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))

    def server_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials([(self.key.read_bytes(), self.cert.read_bytes())])

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(root_certificates=self.ca.read_bytes())

    def nats_server_block(self) -> str:
        return f'tls {{\n  cert_file: "{self.cert}"\n  key_file: "{self.key}"\n  timeout: 5\n}}\n'


def nats_options(env: Env | None = None) -> dict[str, Any]:
    """Keyword arguments for nats.connect: a verifying TLS context when TLS is configured."""
    settings = TlsSettings.from_env(env)
    return {} if settings is None else {"tls": settings.client_context()}
