"""gRPC EngineService: every RPC delegates to `Engine`, the same path the queue consumer uses."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from proto.gen.polymorph.v1 import engine_service_pb2 as es
from proto.gen.polymorph.v1 import engine_service_pb2_grpc as es_grpc
from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common.grpc_server import create_server
from services.common.log import get_logger
from services.engine_host.engine import Engine, EngineRequestError

log = get_logger("engine_host.grpc")

SERVICE_NAME = "polymorph.v1.EngineService"
T = TypeVar("T")


async def _guard(context: grpc.aio.ServicerContext, call: Callable[[], Awaitable[T]], rpc: str) -> T:
    """Invalid requests → INVALID_ARGUMENT; anything unexpected → INTERNAL with the message."""
    try:
        return await call()
    except EngineRequestError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    except Exception as exc:
        log.exception("rpc failed", rpc=rpc)
        await context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
    raise AssertionError("unreachable: abort raises")


class EngineServicer(es_grpc.EngineServiceServicer):
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def Status(self, request: es.StatusRequest, context) -> es.StatusReply:
        async def call() -> es.StatusReply:
            return self.engine.status()

        return await _guard(context, call, "Status")

    async def SwapKernel(self, request: es.SwapKernelRequest, context) -> es.SwapKernelReply:
        return await _guard(context, lambda: self.engine.swap(request.candidate, request.tier), "SwapKernel")

    async def Rollback(self, request: es.RollbackRequest, context) -> es.SwapKernelReply:
        return await _guard(
            context, lambda: self.engine.rollback(request.slot, request.tier, request.to_candidate_id), "Rollback")

    async def Benchmark(self, request: es.BenchmarkRequest, context) -> ev.BenchmarkResult:
        return await _guard(
            context,
            lambda: self.engine.benchmark(request.candidate, list(request.shapes), request.tier, request.rounds),
            "Benchmark",
        )

    async def RunSlot(self, request: es.RunSlotRequest, context) -> es.RunSlotReply:
        return await _guard(context, lambda: self.engine.run_slot(request), "RunSlot")

    async def Profile(self, request: es.ProfileRequest, context) -> es.ProfileReply:
        return await _guard(context, lambda: self.engine.profile(request), "Profile")

    async def Generate(self, request: es.GenerateRequest, context) -> es.GenerateReply:
        return await _guard(context, lambda: self.engine.generate(request), "Generate")


def build_server(engine: Engine, host: str = "127.0.0.1", port: int = 0):
    """(server, bound port, health servicer); start with `await server.start()` then `mark_serving`."""

    def register(server: grpc.aio.Server) -> None:
        es_grpc.add_EngineServiceServicer_to_server(EngineServicer(engine), server)

    return create_server(register, service_names=(SERVICE_NAME,), host=host, port=port)
