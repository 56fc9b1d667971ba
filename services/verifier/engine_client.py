"""The slow-tier engine host, seen from the verifier: discovery over NATS, calls over gRPC.

Every transport problem (no engine answering, a gRPC error, a deadline) becomes `EngineUnavailable`,
which the service turns into a nak and a retry. It is never the candidate's fault.
"""

from __future__ import annotations

import grpc
import nats.errors

from proto.gen.polymorph.v1 import engine_service_pb2 as es
from proto.gen.polymorph.v1 import engine_service_pb2_grpc as es_grpc
from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Bus, Poison
from services.common.grpc_server import channel
from services.common.log import get_logger

log = get_logger("verifier.engine")

# Codes after which the cached address is forgotten and the engine discovered again.
_REDISCOVER = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNIMPLEMENTED}


class EngineUnavailable(Exception):
    """No slow-tier engine could be reached or it failed to answer: retry later."""


class EngineClient:
    def __init__(self, bus: Bus | None, model: str, *, address: str | None = None,
                 rpc_timeout_s: float = 300.0, discover_timeout_s: float = 5.0) -> None:
        self.bus = bus
        self.model = model
        self.fixed_address = address
        self.rpc_timeout_s = rpc_timeout_s
        self.discover_timeout_s = discover_timeout_s
        self._address: str | None = None
        self._channel: grpc.aio.Channel | None = None
        self._stub: es_grpc.EngineServiceStub | None = None
        self.engine_id = ""

    async def _discover(self) -> str:
        if self.fixed_address:
            return self.fixed_address
        if self.bus is None:
            raise EngineUnavailable("no engine address configured and no bus to discover one")
        request = ev.DiscoverRequest(model=self.model, tier="slow")
        try:
            reply = await self.bus.request(subjects.ENGINE_DISCOVER, request, ev.EngineAddress,
                                           timeout_s=self.discover_timeout_s)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError) as exc:
            raise EngineUnavailable(f"no slow-tier engine for {self.model!r} answered engine.discover") from exc
        except Poison as exc:
            raise EngineUnavailable(f"engine.discover reply unreadable: {exc}") from exc
        if reply.error or not reply.address:
            raise EngineUnavailable(f"engine.discover: {reply.error or 'empty address'}")
        self.engine_id = reply.engine_id
        log.info("engine discovered", address=reply.address, engine_id=reply.engine_id, model=reply.model)
        return reply.address

    async def stub(self) -> es_grpc.EngineServiceStub:
        if self._stub is None:
            self._address = await self._discover()
            self._channel = channel(self._address)
            self._stub = es_grpc.EngineServiceStub(self._channel)
        return self._stub

    async def forget(self) -> None:
        if self._channel is not None:
            await self._channel.close()
        self._channel = self._stub = self._address = None

    async def _call(self, method: str, request):
        stub = await self.stub()
        try:
            return await getattr(stub, method)(request, timeout=self.rpc_timeout_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in _REDISCOVER:
                await self.forget()
            raise EngineUnavailable(f"{method} failed: {exc.code().name}: {exc.details()}") from exc

    async def run_slot(self, request: es.RunSlotRequest) -> es.RunSlotReply:
        return await self._call("RunSlot", request)

    async def generate(self, request: es.GenerateRequest) -> es.GenerateReply:
        return await self._call("Generate", request)

    async def status(self) -> es.StatusReply:
        return await self._call("Status", es.StatusRequest())

    async def close(self) -> None:
        await self.forget()
