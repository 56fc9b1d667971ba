"""The live profiler: traffic.requests in, traffic.drift out; campaigns.completed re-bases.

Exactly-once effect over at-least-once delivery: a record whose stream sequence is not newer than
the last one observed is not observed again; a fired drift waits in an outbox (part of the
snapshot) until JetStream acknowledged it, and its id is deterministic, so a re-publish dedups.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import metrics, subjects
from services.common.bus import Bus, Delivery, Poison
from services.common.log import get_logger
from services.traffic_profiler import state as snapshots
from services.traffic_profiler.config import ProfilerConfig
from services.traffic_profiler.detector import DriftDetector
from services.traffic_profiler.records import MalformedRecord, Record

log = get_logger("traffic_profiler")
DURABLE = "traffic-profiler"
CAMPAIGNS_DURABLE = "traffic-profiler-campaigns"
STREAM = "TRAFFIC"
IDLE_DRAIN_S = 1.0  # wall seconds without a record before the reordering window is released


class TrafficProfiler:
    name = "traffic_profiler"

    def __init__(self, config: ProfilerConfig) -> None:
        self.config = config
        self.snapshot_path = config.state_dir / "detector.pkl"
        self.state = snapshots.load(self.snapshot_path) or snapshots.ProfilerState(DriftDetector(config.detector))
        self.bus: Bus | None = None
        self._last_snapshot = time.monotonic()
        self._last_record = time.monotonic()
        self._drainer: asyncio.Task | None = None
        self._publishing = asyncio.Lock()  # the drainer and the record handler share the outbox

    @property
    def detector(self) -> DriftDetector:
        return self.state.detector

    async def start(self, bus: Bus) -> None:
        self.bus = bus
        await self._catch_up(bus)
        await bus.consume(subjects.TRAFFIC_REQUESTS, ev.RequestRecord, self._on_record, durable=DURABLE, batch=256)
        await bus.consume(subjects.CAMPAIGN_COMPLETED, ev.Campaign, self._on_campaign, durable=CAMPAIGNS_DURABLE)
        self._drainer = asyncio.create_task(self._drain_when_idle(), name="traffic-profiler-drain")
        log.info("profiler started", resumed_at_seq=self.state.last_seq, records=self.detector.records)

    async def stop(self) -> None:
        if self._drainer is not None:
            self._drainer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._drainer
        self._save()
        log.info("profiler stopped", records=self.detector.records, malformed=self.state.malformed,
                 drifts=self.state.drifts)

    async def _catch_up(self, bus: Bus) -> None:
        """Observe records acknowledged after the snapshot was taken (the window a crash lost)."""
        try:
            info = await bus.js.consumer_info(STREAM, DURABLE)
        except Exception:
            return  # first start: nothing was acknowledged yet
        floor = info.ack_floor.stream_seq if info.ack_floor else 0
        missed = range(self.state.last_seq + 1, floor + 1)
        for seq in missed:
            try:
                raw = await bus.js.get_msg(STREAM, seq)
            except Exception:
                continue  # expired from the stream, or not a traffic record
            try:
                self._observe(ev.RequestRecord.FromString(raw.data), seq)
            except (Poison, ValueError):
                continue
        if missed:
            log.info("caught up from the stream", records=len(missed), last_seq=self.state.last_seq)
        await self._flush_outbox()

    def _observe(self, msg: ev.RequestRecord, seq: int) -> None:
        try:
            record = Record.from_proto(msg)
        except MalformedRecord as exc:
            self.state.malformed += 1
            metrics.TRAFFIC_MALFORMED.inc()
            self.state.last_seq = max(self.state.last_seq, seq)
            raise Poison(f"malformed request record (#{self.state.malformed}): {exc}") from exc
        fired = self.detector.observe(record)
        metrics.TRAFFIC_REQUESTS.inc()
        self.state.last_seq = max(self.state.last_seq, seq)
        self._keep(fired)

    def _keep(self, fired: list) -> None:
        """Fired drifts go to the outbox, saved before anything is published."""
        if fired:
            self.state.outbox.extend(fired)
            self.state.drifts += len(fired)
            self._save()

    async def _drain_when_idle(self) -> None:
        """Records wait in the detector's reordering window until later ones push them out; when the
        traffic pauses (no record for IDLE_DRAIN_S) they are released, so a pause never hides the last
        minute of traffic, and a drift it completes is published."""
        while True:
            await asyncio.sleep(IDLE_DRAIN_S / 2)
            if not self.detector.pending or time.monotonic() - self._last_record < IDLE_DRAIN_S:
                continue
            try:
                self._keep(self.detector.drain())
                self._save()
                await self._flush_outbox()
            except Exception as exc:  # the bus is away: the outbox is kept, retried on the next record or pause
                log.warning("idle drain failed; retried", error=f"{type(exc).__name__}: {exc}")

    async def _on_record(self, msg: ev.RequestRecord, delivery: Delivery) -> None:
        self._last_record = time.monotonic()
        if delivery.stream_seq > self.state.last_seq:
            self._observe(msg, delivery.stream_seq)
        await self._flush_outbox()
        if time.monotonic() - self._last_snapshot >= self.config.snapshot_every_s:
            self._save()

    async def _on_campaign(self, msg: ev.Campaign, delivery: Delivery) -> None:
        if msg.state == ev.CAMPAIGN_STATE_COMPLETED:
            self.detector.request_rebase()
            log.info("campaign completed: reference re-bases at the next tick", campaign=msg.campaign_id)

    async def _flush_outbox(self) -> None:
        """Publish fired drifts; a failure raises, so the record is redelivered and we try again."""
        assert self.bus is not None
        async with self._publishing:
            await self._publish_outbox(self.bus)

    async def _publish_outbox(self, bus: Bus) -> None:
        while self.state.outbox:
            drift = self.state.outbox[0]
            if await bus.publish(subjects.TRAFFIC_DRIFT, drift.to_proto(self.config.model), msg_id=drift.drift_id):
                metrics.TRAFFIC_DRIFTS.inc()  # not a re-publish of one a crash left in the outbox
            self.state.outbox.pop(0)
            log.info("drift published", drift_id=drift.drift_id, t_s=drift.t_s,
                     changes=[(c.metric, round(c.before, 3), round(c.after, 3)) for c in drift.changes],
                     buckets=len(drift.current.buckets))
            self._save()

    def _save(self) -> None:
        snapshots.save(self.state, self.snapshot_path)
        self._last_snapshot = time.monotonic()
