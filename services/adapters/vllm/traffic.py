"""vLLM's finished requests as RequestRecords on traffic.requests, without ever slowing serving.

`TrafficPublisher` takes records on the serving path (a bounded deque append, O(1), never blocks)
and a thread of its own publishes them in batches with JetStream acks. While NATS is slow or away
the deque keeps the newest `POLYMORPH_TRAFFIC_QUEUE` records and counts what it dropped; a failed
batch goes back to the front. stat_logger.py feeds it from vLLM. No vLLM import here.
"""

from __future__ import annotations

import asyncio
import collections
import os
import threading
from typing import Any

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.adapters.vllm.background import BackgroundLoop
from services.adapters.vllm.settings import AdapterSettings
from services.common import subjects
from services.common.log import get_logger

log = get_logger("adapters.vllm.traffic")
BATCH = 256
FLUSH_S = 0.2


class TrafficPublisher:
    def __init__(self, settings: AdapterSettings) -> None:
        self.settings = settings
        self.queue: collections.deque[ev.RequestRecord] = collections.deque()
        self.dropped = 0
        self.published = 0
        self.failed_batches = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._background = BackgroundLoop("polymorph-traffic", self._run)
        self._nc: Any = None

    def offer(self, record: ev.RequestRecord) -> None:
        """On the serving path: keep the record for the publisher thread, or count it dropped."""
        with self._lock:
            if len(self.queue) >= self.settings.traffic_queue:
                self.queue.popleft()  # the oldest goes: the profiler wants what traffic looks like now
                self.dropped += 1
            self.queue.append(record)
        if not self._background.started and self.settings.nats_url:
            self._background.start()

    def _take(self) -> list[ev.RequestRecord]:
        with self._lock:
            return [self.queue.popleft() for _ in range(min(BATCH, len(self.queue)))]

    def _give_back(self, batch: list[ev.RequestRecord]) -> None:
        with self._lock:
            room = max(self.settings.traffic_queue - len(self.queue), 0)
            self.dropped += len(batch) - min(room, len(batch))
            self.queue.extendleft(reversed(batch[len(batch) - min(room, len(batch)):]))

    async def _run(self) -> None:
        try:
            await self._publish_forever()
        finally:
            if self._nc is not None and not self._nc.is_closed:  # its reconnect loop must not outlive it
                await self._nc.close()

    async def _publish_forever(self) -> None:
        import nats

        nc = None
        while not self._stop.is_set():
            try:
                if nc is None or nc.is_closed:
                    nc = await nats.connect(self.settings.nats_url, name=f"vllm-traffic-{os.getpid()}",
                                            max_reconnect_attempts=-1, reconnect_time_wait=1.0,
                                            connect_timeout=2.0, error_cb=self._on_error)
                    self._nc = nc
                js = nc.jetstream()
                batch = self._take()
                if not batch:
                    await asyncio.sleep(FLUSH_S)
                    continue
                sent = 0
                try:
                    for record in batch:
                        await js.publish(subjects.TRAFFIC_REQUESTS, record.SerializeToString(), timeout=2.0,
                                         headers={"Nats-Msg-Id": f"{subjects.TRAFFIC_REQUESTS}:{record.request_id}"})
                        sent += 1
                finally:
                    self.published += sent
                    if sent < len(batch):
                        self.failed_batches += 1
                        self._give_back(batch[sent:])
            except Exception as exc:  # no server, a timeout: records wait (bounded), serving goes on
                log.warning("traffic not published yet", error=f"{type(exc).__name__}: {exc}"[:300],
                            queued=len(self.queue), dropped=self.dropped)
                await asyncio.sleep(1.0)

    async def _on_error(self, exc: Exception) -> None:
        log.warning("nats error", error=str(exc)[:300])

    def stop(self) -> None:
        """End the publisher thread, a connection attempt in progress included (tests; vLLM's process
        exit ends the daemon thread anyway)."""
        self._stop.set()
        self._background.stop()

    def counters(self) -> dict[str, int]:
        return {"queued": len(self.queue), "published": self.published, "dropped": self.dropped,
                "failed_batches": self.failed_batches}


def record_of(finished: Any, finished_unix: float, model: str, tag: str) -> ev.RequestRecord:
    """A RequestRecord from vLLM's FinishedRequestStats (its arrival: the iteration's time less e2e)."""
    record = ev.RequestRecord(arrival_s=finished_unix - float(finished.e2e_latency),
                              prompt_tokens=int(finished.num_prompt_tokens),
                              output_tokens=int(finished.num_generation_tokens), model=model, tag=tag,
                              request_id=str(finished.request_id))
    cached = getattr(finished, "num_cached_tokens", None)
    if cached is not None:
        record.cached_tokens = int(cached)
    return record
