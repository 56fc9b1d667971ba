"""The sidecar in a vLLM worker: follows kernel.promoted / kernel.demoted and swaps the worker's table.

It reads the whole KERNELS stream through an ordered consumer of its own (the `serving` identity
may do nothing else there), so a worker started after promotions catches up, in stream order
(services/engine_host/incumbents.py decides each slot's incumbent). A message acts only when the
registry's key signed it (services/common/signing.py), it names this worker's model and hardware,
and its slot is one the adapter serves. A promoted kernel is loaded, then checked against vLLM's
own op on the inputs this worker recorded (its own shapes and dtypes) before the entry is swapped;
one that fails is refused with a log line and never served, one that arrives before the worker
has served anything waits for its first inputs. A demotion restores vLLM's op (or the previous
promotion). NATS away or slow changes nothing for serving: the sidecar runs on a thread of its
own, reconnects forever, and every error stays in its log and its state file.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.adapters.vllm.background import BackgroundLoop
from services.adapters.vllm.settings import AdapterSettings
from services.adapters.vllm.table import NATIVE, SERVED_SLOTS, ServingTable
from services.common import subjects
from services.common.identities import redact
from services.common.log import get_logger
from services.common.signing import SignatureError, decode_public, verify
from services.engine_host.incumbents import Incumbents
from services.engine_host.loader import LoadError, load_candidate

log = get_logger("adapters.vllm")
STATE_EVERY_S = 0.5


class Sidecar:
    def __init__(self, table: ServingTable, settings: AdapterSettings, hardware: str, dispatch: str) -> None:
        self.table, self.settings, self.hardware, self.dispatch = table, settings, hardware, dispatch
        self.incumbents = Incumbents()
        self.refused_events = 0  # unsigned, forged, malformed or foreign kernel events
        self.refused_ids: dict[str, str] = {}  # candidate id → why this worker will not serve it
        self.waiting: set[str] = set()  # slots whose promotion waits for this worker's first inputs
        self.connected = False
        self.state_file = settings.state_dir / f"worker-{os.getpid()}.json"
        self.kernels_dir = settings.state_dir / "kernels"
        self._key: Any = None
        self._background = BackgroundLoop("polymorph-sidecar", self._main)
        self._nc: Any = None

    def stop(self) -> None:
        """End the sidecar's thread, a connection attempt in progress included (tests)."""
        self._background.stop()

    def start(self) -> None:
        self._background.start()
        log.info("polymorph adapter attached", model=self.settings.model, hardware=self.hardware,
                 dispatch=self.dispatch, follows=bool(self._follows()), state_file=str(self.state_file))

    def _follows(self) -> str:
        """'' when this worker follows promotions; otherwise why not."""
        if not self.settings.nats_url:
            return "POLYMORPH_NATS_URL is not set"
        if not self.settings.model:
            return "POLYMORPH_MODEL is not set (the model promotions must name)"
        if not self.settings.swaps:
            return "POLYMORPH_SERVING_SWAPS=off"
        if self.dispatch != "eager":
            return "vLLM compiles the model (the op dispatch is traced away): start it with --enforce-eager"
        return ""

    async def _main(self) -> None:
        tasks = [asyncio.create_task(self._write_state_forever())]
        if not self._follows():
            tasks.append(asyncio.create_task(self._follow_forever()))
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            if self._nc is not None and not self._nc.is_closed:  # stopped: no reconnect loop outlives it
                await self._nc.close()

    # -- the bus --------------------------------------------------------------------------------
    async def _follow_forever(self) -> None:
        import nats
        from nats.js.api import ConsumerConfig, DeliverPolicy

        while True:
            try:
                nc = await nats.connect(self.settings.nats_url, name=f"vllm-adapter-{os.getpid()}",
                                        max_reconnect_attempts=-1, reconnect_time_wait=1.0, connect_timeout=2.0,
                                        error_cb=self._on_error, disconnected_cb=self._on_disconnect,
                                        reconnected_cb=self._on_reconnect)
                self._nc = nc
                js = nc.jetstream()
                await js.subscribe("kernel.>", cb=self._on_message, ordered_consumer=True,
                                   config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL))
                self.connected = True
                log.info("following promotions", nats=redact(self.settings.nats_url))
                while nc.is_connected or nc.is_reconnecting:
                    await asyncio.sleep(1.0)
            except Exception as exc:  # no server yet, no stream yet: try again
                self.connected = False
                log.warning("promotions not followed yet", error=f"{type(exc).__name__}: {exc}"[:300])
                await asyncio.sleep(2.0)

    async def _on_error(self, exc: Exception) -> None:
        log.warning("nats error", error=str(exc)[:300])

    async def _on_disconnect(self) -> None:
        self.connected = False

    async def _on_reconnect(self) -> None:
        self.connected = True

    async def _on_message(self, msg: Any) -> None:
        try:
            self.handle(msg.subject, msg.data, msg.metadata.sequence.stream)
        except Exception as exc:  # never let one message stop the consumer
            log.error("kernel event not handled", subject=msg.subject, error=f"{type(exc).__name__}: {exc}"[:300])

    # -- one event ------------------------------------------------------------------------------
    def handle(self, subject: str, data: bytes, seq: int) -> None:
        if subject not in (subjects.KERNEL_PROMOTED, subjects.KERNEL_DEMOTED):
            return
        try:
            event: ev.KernelPromoted | ev.KernelDemoted = (
                ev.KernelPromoted.FromString(data) if subject == subjects.KERNEL_PROMOTED
                else ev.KernelDemoted.FromString(data))
            verify(event, self._registry_key())
        except (DecodeError, SignatureError) as exc:
            self.refused_events += 1
            log.error("kernel event refused", subject=subject, reason=str(exc)[:300], refused=self.refused_events)
            return
        if event.model != self.settings.model or (event.hardware and event.hardware != self.hardware):
            return  # another model's or another chip's kernel
        if event.slot not in SERVED_SLOTS:
            return  # a slot (or region) vLLM has no op for
        if isinstance(event, ev.KernelPromoted):
            self.incumbents.promoted(event, seq)
        else:
            self.incumbents.demoted(event, seq)
        self.apply(event.slot)

    def _registry_key(self) -> Any:
        if self._key is None:
            text = self.settings.registry_key
            if not text and self.settings.registry_key_file:
                text = Path(self.settings.registry_key_file).read_text()
            if not text:
                raise SignatureError("no registry public key configured (POLYMORPH_REGISTRY_PUBLIC_KEY[_FILE])")
            self._key = decode_public(text)
        return self._key

    def apply(self, slot: str) -> None:
        """Make the slot hold its incumbent: vLLM's op, or the promoted kernel once it passed here."""
        want = self.incumbents.desired(slot)
        self.waiting.discard(slot)
        if want is None:
            if self.table.installed_id(slot) != NATIVE:
                self.table.restore(slot, "demoted")
                log.info("vLLM's op restored", slot=slot)
            return
        if self.table.installed_id(slot) == want.candidate_id or want.candidate_id in self.refused_ids:
            return
        try:
            loaded = load_candidate(want.source, slot, self.kernels_dir, want.candidate_id)
        except LoadError as exc:
            self._refuse(slot, want.candidate_id, f"did not load: {exc}")
            return
        if not self.table.recorded(slot):
            self.waiting.add(slot)
            log.info("promotion waits for this worker's first inputs", slot=slot, candidate_id=want.candidate_id)
            return
        verdict = self.table.check(slot, loaded.kernel)
        if not verdict.passed:
            self._refuse(slot, want.candidate_id, f"differs from vLLM's op: {verdict.detail}")
            return
        self.table.install(slot, want.candidate_id, loaded.kernel, verdict.detail)
        log.info("kernel installed", slot=slot, candidate_id=want.candidate_id, check=verdict.detail)

    def _refuse(self, slot: str, candidate_id: str, why: str) -> None:
        self.refused_ids[candidate_id] = why
        self.table.refuse(slot, candidate_id, why)
        log.error("kernel refused: not served", slot=slot, candidate_id=candidate_id, reason=why[:300])
        if self.table.installed_id(slot) != NATIVE:  # a refused successor must not leave its predecessor
            self.table.restore(slot, f"successor {candidate_id} refused")

    # -- state ------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "model": self.settings.model, "hardware": self.hardware,
                "dispatch": self.dispatch, "follows": self._follows() or "yes", "connected": self.connected,
                "refused_events": self.refused_events, "refused": dict(self.refused_ids),
                "waiting": sorted(self.waiting), "written_unix": time.time(), **self.table.state()}

    async def _write_state_forever(self) -> None:
        self.settings.state_dir.mkdir(parents=True, exist_ok=True)
        while True:
            for slot in list(self.waiting):  # a waiting promotion is checked once inputs exist
                if self.table.recorded(slot):
                    self.apply(slot)
            tmp = self.state_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.state(), indent=1))
            os.replace(tmp, self.state_file)
            await asyncio.sleep(STATE_EVERY_S)
