"""EngineHostService: harnesses + gRPC EngineService + engine.discover + the bus consumers.

- candidates.proposed (durable "engine-fast", shared by every fast host: a work queue) → benchmark on
  the fast tier at the candidate's shapes (else the defaults) → candidates.benchmarked, msg_id =
  candidate id. Results are kept on disk per host, so a redelivered or re-proposed candidate gets the
  very same result again (and the stream's dedup window drops the duplicate).
- kernel.promoted / kernel.demoted (durable per host, recreated at every start so the whole history
  replays) → the promoted kernel becomes the incumbent on every tier; a restarted host re-installs
  them all, in stream order.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any, cast

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from nats.js.errors import NotFoundError

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import metrics, subjects
from services.common.bus import Bus, Delivery, Poison, parse
from services.common.config import CommonSettings, Env
from services.common.grpc_server import mark_serving
from services.common.log import get_logger
from services.common.signing import SignatureError, decode_public, verify
from services.common.slot_specs import REGIONS, SLOTS, candidate_id
from services.engine_host.config import EngineHostConfig
from services.engine_host.engine import Engine
from services.engine_host.grpc_api import SERVICE_NAME, build_server
from services.engine_host.incumbents import Incumbents, as_candidate

log = get_logger("engine_host")

KERNEL_STREAM = next(s.name for s in subjects.STREAMS if "kernel.>" in s.subjects)


class ResultStore:
    """One file per benchmarked candidate id (serialized BenchmarkResult)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _path(self, candidate_id: str) -> Path:
        return self.root / f"{re.sub(r'[^A-Za-z0-9_-]', '_', candidate_id)}.pb"

    def get(self, candidate_id: str) -> ev.BenchmarkResult | None:
        path = self._path(candidate_id)
        if not path.exists():
            return None
        try:
            return ev.BenchmarkResult.FromString(path.read_bytes())
        except Exception:  # a torn write: measure again
            return None

    def put(self, result: ev.BenchmarkResult) -> None:
        path = self._path(result.candidate_id)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(result.SerializeToString())
        tmp.replace(path)


def _durable(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)


class EngineHostService:
    name = "engine_host"

    def __init__(self, config: EngineHostConfig, common: CommonSettings) -> None:
        self.config, self.common = config, common
        self.model = common.model
        self.engine = Engine(config, common.model, common.data_dir)
        self.results = ResultStore(common.data_dir / "engine" / _durable(config.engine_id) / "results")
        self.incumbents = Incumbents()
        self.server: Any = None
        self.port = 0
        self.bus: Bus | None = None
        self._key: Ed25519PublicKey | None = None
        self.refused_kernel_events = 0  # forged, altered or unsigned promotions and demotions

    @property
    def address(self) -> str:
        return f"{self.config.advertise_host or self.config.grpc_host}:{self.port}"

    async def start(self, bus: Bus) -> None:
        self.bus = bus
        await self.engine.start()
        self.server, self.port, health = build_server(self.engine, self.config.grpc_host, self.config.grpc_port)
        await self.server.start()
        await mark_serving(health, (SERVICE_NAME,))
        await bus.nc.subscribe(subjects.ENGINE_DISCOVER, cb=self._on_discover)
        kernels = _durable(f"engine-{self.config.engine_id}-{self.model}-kernels")
        for subject, msg_type, handler, durable in (
            (subjects.KERNEL_PROMOTED, ev.KernelPromoted, self._on_promoted, f"{kernels}-promoted"),
            (subjects.KERNEL_DEMOTED, ev.KernelDemoted, self._on_demoted, f"{kernels}-demoted"),
        ):
            # a fresh harness holds only the reference ops: replay the whole history, not just the unacked
            with contextlib.suppress(NotFoundError):
                await bus.js.delete_consumer(KERNEL_STREAM, durable)
            await bus.consume(subject, msg_type, cast(Any, handler), durable=durable, ack_wait_s=120.0)
        if self.config.consume and "fast" in self.engine.tiers:
            await bus.consume(subjects.CANDIDATES_PROPOSED, ev.Candidate, self._on_candidate,
                              durable=self.config.durable, ack_wait_s=max(60.0, self.config.candidate_timeout_s),
                              batch=1)
        log.info("engine host ready", address=self.address, engine_id=self.config.engine_id, model=self.model,
                 hardware=self.engine.hardware, tiers=list(self.engine.tiers))

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(2.0)
        await self.engine.stop()

    # -- engine.discover --------------------------------------------------------------------
    async def _on_discover(self, msg) -> None:
        """Answer only when this host fits, so with several hosts the requester gets one that does."""
        try:
            req = parse(ev.DiscoverRequest, msg.data)
        except Poison as exc:
            if msg.reply:
                await msg.respond(ev.EngineAddress(error=str(exc)).SerializeToString())
            return
        if (req.model and req.model != self.model) or (req.tier and req.tier not in self.engine.tiers):
            return
        reply = ev.EngineAddress(address=self.address, engine_id=self.config.engine_id, model=self.model,
                                 hardware=self.engine.hardware, tiers=list(self.engine.tiers))
        if msg.reply:
            with contextlib.suppress(Exception):
                await msg.respond(reply.SerializeToString())

    # -- candidates.proposed → candidates.benchmarked ---------------------------------------
    async def _on_candidate(self, candidate: ev.Candidate, delivery: Delivery) -> None:
        assert self.bus is not None
        if not candidate.slot and not candidate.source:
            raise Poison("candidate has neither slot nor source")
        if candidate.model and candidate.model != self.model:
            raise Poison(f"candidate for model {candidate.model!r}; this host serves {self.model!r}")
        if not candidate.candidate_id:
            raise Poison("candidate has no candidate_id")
        # the id keys every result this host keeps: one that is not the content hash could squat on a
        # real candidate's id and have its (failed) result served in place of the real one's
        expected = candidate_id(candidate.slot, candidate.source)
        if candidate.candidate_id != expected:
            raise Poison(f"candidate id {candidate.candidate_id} is not the content hash of its slot and source "
                         f"({expected})")
        result = self.results.get(candidate.candidate_id)
        if result is None:
            result = await self.engine.benchmark(candidate, list(candidate.shapes))
            self.results.put(result)  # before publishing: a redelivery republishes the same numbers
        else:
            log.info("already benchmarked; republishing", candidate_id=candidate.candidate_id)
        await self.bus.publish(subjects.CANDIDATES_BENCHMARKED, result, msg_id=result.candidate_id)

    # -- kernel.promoted / kernel.demoted ---------------------------------------------------
    def _ours(self, model: str, hardware: str, slot: str, what: str) -> bool:
        if slot not in SLOTS and slot not in REGIONS:
            raise Poison(f"{what} for unknown slot {slot!r}")
        if model and model != self.model:
            return False
        if hardware and self.engine.hardware and hardware != self.engine.hardware:
            log.info(f"{what} for other hardware ignored", hardware=hardware)
            return False
        return True

    def _registry_key(self) -> Ed25519PublicKey:
        """The registry's public key: configured, or the file the registry writes at its first start
        (not there yet: the message is retried until it is)."""
        if self._key is None:
            text = self.config.registry_key
            if not text:
                path = Path(self.config.registry_key_file)
                if not path.exists():
                    raise RuntimeError(f"no registry public key yet at {path}")
                text = path.read_text()
            self._key = decode_public(text)
        return self._key

    def _authentic(self, msg: ev.KernelPromoted | ev.KernelDemoted) -> None:
        try:
            verify(msg, self._registry_key())
        except SignatureError as exc:
            self.refused_kernel_events += 1
            subject = subjects.KERNEL_PROMOTED if isinstance(msg, ev.KernelPromoted) else subjects.KERNEL_DEMOTED
            metrics.KERNEL_EVENTS_REFUSED.labels(subject).inc()
            log.error("kernel event refused", candidate_id=msg.candidate_id, slot=msg.slot, reason=str(exc),
                      refused=self.refused_kernel_events)
            raise Poison(f"refused: {exc}") from exc

    async def _on_promoted(self, msg: ev.KernelPromoted, delivery: Delivery) -> None:
        self._authentic(msg)
        if self._ours(msg.model, msg.hardware, msg.slot, "promotion"):
            self.incumbents.promoted(msg, delivery.stream_seq)
            await self._apply(msg.slot)

    async def _on_demoted(self, msg: ev.KernelDemoted, delivery: Delivery) -> None:
        self._authentic(msg)
        if self._ours(msg.model, msg.hardware, msg.slot, "demotion"):
            self.incumbents.demoted(msg, delivery.stream_seq)
            await self._apply(msg.slot)

    async def _apply(self, slot: str) -> None:
        want = self.incumbents.desired(slot)
        want_id = want.candidate_id if want else "reference"
        if all(tier.op_ids().get(slot, "reference") == want_id for tier in self.engine.tiers.values()):
            return
        ok = await self.engine.set_incumbent(slot, as_candidate(want) if want else None,
                                             want.speedup_vs_reference if want else 1.0)
        log.info("incumbent changed" if ok else "incumbent change failed", slot=slot, candidate_id=want_id)


def build(env: Env, common: CommonSettings) -> EngineHostService:
    return EngineHostService(EngineHostConfig.from_env(env, common.model, common.data_dir), common)
