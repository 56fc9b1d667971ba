"""The stack with TLS on (self-signed CA, a server certificate for 127.0.0.1): nats-server and the engine
host's gRPC accept only TLS clients that trust the CA; every service, the CLI's client and a campaign
work over it; plain-text and untrusting clients are refused."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from pathlib import Path

import grpc
import nats
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.tls import TlsSettings
from services.console import client
from services.console.stack import Stack
from tests.integration.conftest import STACK_ENV, wait_campaigns_settled, wait_ready

pytestmark = pytest.mark.timeout(600)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def make_certificates(directory: Path, ca_name: str = "polymorph test CA") -> tuple[Path, Path, Path]:
    """A CA and a server certificate for localhost / 127.0.0.1 signed by it: (ca, cert, key) files."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name(ca_name)).issuer_name(_name(ca_name))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    san = x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    cert = (x509.CertificateBuilder().subject_name(_name("127.0.0.1")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(san, critical=False).sign(ca_key, hashes.SHA256()))
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, paths[2])
    return paths


async def _refused(url: str, **options) -> bool:
    try:
        nc = await nats.connect(url, connect_timeout=3, allow_reconnect=False, max_reconnect_attempts=0, **options)
    except Exception:
        return True
    await nc.close()
    return False


async def test_the_whole_loop_runs_over_tls_and_plain_clients_are_refused(tmp_path: Path, monkeypatch) -> None:
    ca, cert, key = make_certificates(tmp_path / "tls")
    for name, path in (("CA", ca), ("CERT", cert), ("KEY", key)):
        monkeypatch.setenv(f"POLYMORPH_TLS_{name}", str(path))  # the services, the CLI and this test
    stack = Stack(tmp_path / "stack", extra_env=STACK_ENV, port=-1)
    stack.start()
    try:
        await wait_ready(stack)
        assert "tls {" in (stack.data_dir / "nats" / "nats.conf").read_text()
        settings = TlsSettings.from_env()
        assert settings is not None
        assert await _refused(stack.nats_url)  # plain text
        other_ca, _, _ = make_certificates(tmp_path / "other", "someone else's CA")
        assert await _refused(stack.nats_url, tls=ssl.create_default_context(cafile=str(other_ca)))
        assert not await _refused(stack.nats_url, tls=settings.client_context())

        nc = await nats.connect(stack.nats_url, tls=settings.client_context())
        reply = await nc.request(subjects.ENGINE_DISCOVER, ev.DiscoverRequest(model="llama-tiny").SerializeToString(),
                                 timeout=10)
        await nc.close()
        address = ev.EngineAddress.FromString(reply.data).address
        request = health_pb2.HealthCheckRequest()
        async with grpc.aio.secure_channel(address, settings.channel_credentials()) as channel:
            answer = await health_pb2_grpc.HealthStub(channel).Check(request, timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        async with grpc.aio.insecure_channel(address) as channel:
            with pytest.raises(grpc.aio.AioRpcError):
                await health_pb2_grpc.HealthStub(channel).Check(request, timeout=5)

        campaign = await client.start_campaign(stack.nats_url, ev.StartCampaignRequest(
            model="llama-tiny", slots=["rmsnorm"], budget=4))
        assert campaign.campaign_id, campaign.stop_reason
        snap = await wait_campaigns_settled(stack, timeout_s=420)
        assert snap.totals["benchmarked"] >= 1
    finally:
        stack.stop()
