"""The agent pool service: starts campaigns on drift or on request, routes feedback, resumes after a crash.

- `traffic.drift` (durable "agent-pool-drift"): one campaign per drift id (the id is derived from the
  drift id, so a redelivered drift finds its campaign and does nothing). A drift that arrives while a
  campaign for the same model runs is QUEUED, not merged: its shapes are a different experiment. Only
  the newest queued drift per model is kept (older queued ones are marked superseded); it starts when
  the running campaign completes.
- `agents.campaign.start` (core request, `polymorph optimize`): starts a campaign at once and replies
  with it; an invalid request (unknown slots, a budget outside 0..max, a model no engine serves, more
  campaigns running than allowed) gets a FAILED campaign whose stop_reason says why, and nothing starts.
- A campaign starts only for a model an engine serves: a drift for another model waits (redelivered
  with backoff) and is refused after its last delivery. At most `max_campaigns` run at once; drift
  campaigns past that are queued.
- `candidates.benchmarked` (durable "agent-pool-feedback"): results for our running campaigns; results
  of other or finished campaigns are acknowledged and ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
import uuid

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.agent_pool import library
from services.agent_pool.agents.search import SearchAgent
from services.agent_pool.board import Board
from services.agent_pool.campaign import CampaignRun, Deps
from services.agent_pool.config import AgentPoolConfig
from services.agent_pool.hardware import discover, triton_for
from services.agent_pool.state import QUEUED, RUNNING, SUPERSEDED, CampaignRecord, Store
from services.common import metrics, subjects
from services.common.bus import Bus, Delivery, Poison
from services.common.config import CommonSettings
from services.common.log import get_logger
from services.common.slot_specs import OPS

log = get_logger("agent_pool")
DRIFT_DELIVERIES = 6  # a drift for a model no engine serves is retried this often, then refused


class NoEngine(Exception):
    """No engine host serves the model (yet): retryable for a drift, a refusal for a request."""


def drift_campaign_id(drift_id: str) -> str:
    return "d-" + hashlib.sha256(f"drift\n{drift_id}".encode()).hexdigest()[:16]


class AgentPoolService:
    name = "agent_pool"

    def __init__(self, cfg: AgentPoolConfig, common: CommonSettings) -> None:
        self.cfg = cfg
        self.common = common
        self.records: dict[str, CampaignRecord] = {}
        metrics.CAMPAIGNS.follow(lambda: metrics.tally(r.status for r in list(self.records.values())))
        self.runs: dict[str, CampaignRun] = {}
        self.tasks: dict[str, asyncio.Task] = {}
        self.ledger: set[str] = set()
        self.llm = None
        if cfg.llm.enabled:  # openai (and httpx) load only here: a GPU machine with no endpoint may lack them
            from services.agent_pool.agents.llm import LlmAgent

            self.llm = LlmAgent(cfg.llm)
        self.search = SearchAgent(explore=cfg.explore)
        self.board: Board | None = None
        self._bus: Bus | None = None
        self._deps: Deps | None = None

    # -- lifecycle --------------------------------------------------------------------------------
    async def start(self, bus: Bus) -> None:
        self._bus = bus
        store = await Store.open(bus.js, self.cfg.kv_bucket)
        self.board = board = Board(bus)
        await board.start()
        self._deps = Deps(bus, store, board, self.cfg, self.search, self.llm, self.ledger, self._on_done)
        records, trials = await store.load()
        self.records = records
        for items in trials.values():
            self.ledger.update(t.candidate_id for t in items)
        for record in records.values():
            if record.status == RUNNING:
                self._launch(record, trials.get(record.campaign_id, []))
        for model in {r.campaign.model for r in records.values() if r.status == QUEUED}:
            await self._start_queued(model)  # the pool died between a completion and the next start
        resumed = [cid for cid in self.runs]
        log.info("agent pool ready", resumed=resumed, ledger=len(self.ledger), llm=self.llm is not None)
        await bus.consume(subjects.TRAFFIC_DRIFT, ev.DriftEvent, self._on_drift, durable="agent-pool-drift",
                          max_deliver=DRIFT_DELIVERIES)
        await bus.consume(
            subjects.CANDIDATES_BENCHMARKED, ev.BenchmarkResult, self._on_result, durable="agent-pool-feedback"
        )
        await bus.serve(subjects.CAMPAIGN_START, ev.StartCampaignRequest, ev.Campaign, self._on_start_request)

    async def stop(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        for task in list(self.tasks.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.tasks.clear()
        if self.llm is not None:
            await self.llm.close()

    def _launch(self, record: CampaignRecord, trials: list) -> None:
        assert self._deps is not None
        run = CampaignRun(record, trials, self._deps)
        self.runs[record.campaign_id] = run
        self.tasks[record.campaign_id] = asyncio.create_task(run.run(), name=f"campaign-{record.campaign_id}")
        log.info("campaign running", campaign=record.campaign_id, model=record.campaign.model,
                 slots=list(record.campaign.slots), budget=record.campaign.budget, resumed=bool(trials))

    async def _on_done(self, run: CampaignRun) -> None:
        self.runs.pop(run.campaign_id, None)
        self.tasks.pop(run.campaign_id, None)
        await self._start_queued(run.campaign.model)

    # -- starting campaigns -----------------------------------------------------------------------
    def _running_for(self, model: str) -> bool:
        return any(r.campaign.model == model for r in (run.record for run in self.runs.values()))

    def _at_capacity(self) -> bool:
        return len(self.runs) >= self.cfg.max_campaigns

    async def _new_record(self, campaign_id: str, model: str, slots: list[str], budget: int,
                          trigger: str, profile: ev.TrafficProfile) -> CampaignRecord:
        """`slots` empty: POLYMORPH_AGENT_SLOTS, else every library slot plus, where Triton runs on the
        engine's hardware, the fused regions."""
        assert self._bus is not None
        engine = await discover(self._bus, model, self.cfg.discover_timeout_s)
        if engine is None:
            raise NoEngine(f"no engine serves model {model!r} (none answered engine.discover within "
                           f"{self.cfg.discover_timeout_s:.0f} s)")
        triton = triton_for(self.cfg.triton, engine)
        campaign = ev.Campaign(
            campaign_id=campaign_id, model=model, slots=slots or list(self.cfg.slots or library.campaign_ops(triton)),
            trigger=trigger, budget=budget, state=ev.CAMPAIGN_STATE_RUNNING, profile=profile,
            started_unix=time.time(),
        )
        return CampaignRecord(campaign, RUNNING, triton, hardware=engine.hardware)

    async def _begin(self, record: CampaignRecord) -> None:
        assert self._deps is not None
        record.status = RUNNING
        record.campaign.state = ev.CAMPAIGN_STATE_RUNNING
        record.campaign.started_unix = time.time()
        self.records[record.campaign_id] = record
        await self._deps.store.put_campaign(record)  # before anything is announced
        self._launch(record, [])

    async def _start_queued(self, model: str) -> None:
        """The newest queued drift campaign of `model` if it can run now, else of any model that can."""
        queued = [r for r in self.records.values() if r.status == QUEUED and not self._running_for(r.campaign.model)]
        if self._at_capacity() or not queued:
            return
        mine = [r for r in queued if r.campaign.model == model] or queued
        await self._begin(max(mine, key=lambda r: r.campaign.started_unix))

    async def _on_drift(self, drift: ev.DriftEvent, delivery: Delivery) -> None:
        if not drift.drift_id:
            raise Poison("drift event without a drift_id")
        campaign_id = drift_campaign_id(drift.drift_id)
        if campaign_id in self.records:
            return  # redelivered, or already queued / run
        model = drift.current.model or self.common.model
        try:
            record = await self._new_record(
                campaign_id, model, [], self.cfg.budget, drift.drift_id, drift.current
            )
        except NoEngine as exc:
            if delivery.num_delivered >= DRIFT_DELIVERIES:
                raise Poison(f"drift {drift.drift_id} refused: {exc}") from exc
            raise  # an engine host may still be starting: retried with backoff
        if not self._running_for(model) and not self._at_capacity():
            await self._begin(record)
            return
        assert self._deps is not None
        for older in self.records.values():
            if older.status == QUEUED and older.campaign.model == model:
                older.status = SUPERSEDED
                await self._deps.store.put_campaign(older)
        record.status = QUEUED
        record.campaign.state = ev.CAMPAIGN_STATE_UNSPECIFIED
        self.records[campaign_id] = record
        await self._deps.store.put_campaign(record)
        log.info("drift queued behind a running campaign", campaign=campaign_id, model=model, drift=drift.drift_id)

    async def _on_start_request(self, request: ev.StartCampaignRequest) -> ev.Campaign:
        slots = list(dict.fromkeys(request.slots))  # empty: the defaults for the engine's hardware
        model = request.model  # required: an empty request is garbage, not "the default campaign"
        why = self._refusal(slots, request.budget) or (None if model else "a campaign request must name its model")
        record = None
        if why is None:
            try:
                record = await self._new_record("m-" + uuid.uuid4().hex[:16], model, slots,
                                                request.budget or self.cfg.budget, "manual", request.profile)
            except NoEngine as exc:
                why = str(exc)
        if record is None:
            log.warning("campaign request refused", model=model, slots=slots, budget=request.budget, reason=why)
            return ev.Campaign(state=ev.CAMPAIGN_STATE_FAILED, stop_reason=why or "", slots=slots, model=model)
        await self._begin(record)
        return record.campaign

    def _refusal(self, slots: list[str], budget: int) -> str | None:
        unknown = [s for s in slots if s not in OPS]
        if unknown:
            return f"unknown slots {unknown}; known {sorted(OPS)}"
        if not 0 <= budget <= self.cfg.max_budget:
            return f"budget {budget} is outside 0..{self.cfg.max_budget} (0: the default, {self.cfg.budget})"
        if self._at_capacity():
            return (f"{len(self.runs)} campaigns are running; at most {self.cfg.max_campaigns} at once "
                    "(POLYMORPH_AGENT_MAX_CAMPAIGNS)")
        return None

    # -- feedback ---------------------------------------------------------------------------------
    async def _on_result(self, result: ev.BenchmarkResult, delivery: Delivery) -> None:
        if not result.candidate_id:
            raise Poison("benchmark result without a candidate_id")
        run = self.runs.get(result.campaign_id)
        if run is None:
            return  # another campaign's, or one that already completed
        if not await run.record_result(result):
            log.warning("result for a candidate this campaign did not propose",
                        campaign=result.campaign_id, candidate=result.candidate_id)
