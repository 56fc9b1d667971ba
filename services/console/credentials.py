"""`polymorph credentials --out DIR`: the secrets compose.yaml runs with (never committed).

  DIR/credentials/<identity>.json   one NATS credential per identity (identities.py; reused when present)
  DIR/nats.conf                     the NATS server's configuration: listen and monitoring addresses,
                                    JetStream, and the per-identity users and permissions
  DIR/<identity>.env                POLYMORPH_NATS_URL with that identity's credentials (compose env_file;
                                    traffic/operator/observer.env are for serving stacks, the CLI, dashboards)
  DIR/registry-signing.key / .pub   the registry's Ed25519 key pair; only the registry gets the private key

Files holding a secret are mode 0600 in a 0700 folder. Running it again keeps the passwords and the key.
"""

from __future__ import annotations

import os
from pathlib import Path

from services.common import identities, nats_server
from services.common.signing import PRIVATE_FILE, PUBLIC_FILE, Signer

# what compose.yaml names: the NATS service, its client and monitoring ports inside the network
NATS_HOST, NATS_PORT, MONITOR_PORT = "nats", 4222, 8222
STORE_DIR = "/data/jetstream"  # on the nats service's volume


def _write_secret(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)  # an older file keeps its mode through O_CREAT


def write(out: Path, nats_host: str = NATS_HOST, nats_port: int = NATS_PORT,
          monitor_port: int = MONITOR_PORT) -> list[Path]:
    """Write (or refresh) everything in `out`; returns the files."""
    out.mkdir(parents=True, exist_ok=True)
    os.chmod(out, 0o700)
    creds = identities.generate(out / "credentials")
    written = [out / "nats.conf"]
    _write_secret(written[0], nats_server.conf(STORE_DIR, credentials=creds, listen=f"0.0.0.0:{nats_port}",
                                               monitor=f"0.0.0.0:{monitor_port}"))
    for name, cred in sorted(creds.items()):
        url = identities.with_credentials(f"nats://{nats_host}:{nats_port}", cred)
        path = out / f"{name}.env"
        _write_secret(path, f"POLYMORPH_NATS_URL={url}\n")
        written.append(path)
    Signer.load_or_create(out)
    written += [out / PRIVATE_FILE, out / PUBLIC_FILE]
    return written
