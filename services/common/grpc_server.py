"""gRPC server helper: bind port 0 (or a given one), register health, stop gracefully."""

from __future__ import annotations

from collections.abc import Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from services.common.tls import TlsSettings

MAX_MESSAGE_BYTES = 256 * 2**20  # captured tensors and logits travel in replies


def create_server(
    register: Callable[[grpc.aio.Server], None],
    *,
    service_names: tuple[str, ...],
    host: str = "127.0.0.1",
    port: int = 0,
) -> tuple[grpc.aio.Server, int, health.aio.HealthServicer]:
    """Build an asyncio gRPC server with the health service; returns (server, bound port, health).

    Call `await server.start()` afterwards and `await server.stop(grace)` on shutdown.
    """
    options = [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ]
    server = grpc.aio.server(options=options)
    register(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    settings = TlsSettings.from_env()
    address = f"{host}:{port}"
    bound = server.add_insecure_port(address) if settings is None else \
        server.add_secure_port(address, settings.server_credentials())
    if bound == 0:
        raise RuntimeError(f"could not bind gRPC server on {host}:{port}")
    return server, bound, health_servicer


async def mark_serving(health_servicer: health.aio.HealthServicer, service_names: tuple[str, ...]) -> None:
    for name in ("", *service_names):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)


def channel(address: str) -> grpc.aio.Channel:
    """A channel to `address`: TLS verified against POLYMORPH_TLS_CA when TLS is configured."""
    options = [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ]
    settings = TlsSettings.from_env()
    if settings is None:
        return grpc.aio.insecure_channel(address, options=options)
    return grpc.aio.secure_channel(address, settings.channel_credentials(), options=options)
