"""One campaign: propose candidates for its slots, learn from their benchmark results, stop, report.

Proposing: first the live step is profiled (aim.py: each slot's share of the step's time); then the
active slot with the fewest candidates per unit of share goes next (the budget follows the time at
stake; a slot that stops frees its share), its agent proposes one candidate, and at most
`in_flight` candidates wait for results at any time, so every result can steer the next proposal.
A slot stops on plateau (`plateau` results without a new best), on its own cap (`slot_budget`, when
set) or when its space is exhausted; the campaign stops proposing when the budget is spent or every
slot stopped, and COMPLETES once every
candidate it proposed has a BenchmarkResult (a candidate still without one is proposed again every
`republish_s`, and declared lost after `result_timeout_s`).

Every change is written to the KV store before it is announced, so a restarted pool resumes here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.agent_pool import aim, library
from services.agent_pool.agents.base import LOST, OK, Agent, Proposal, SlotContext, Trial
from services.agent_pool.agents.search import SearchAgent
from services.agent_pool.board import Board
from services.agent_pool.config import AgentPoolConfig
from services.agent_pool.state import COMPLETED, FAILED, CampaignRecord, Store
from services.common import metrics, subjects
from services.common.bus import Bus
from services.common.log import get_logger
from services.common.slot_specs import SLOTS

if TYPE_CHECKING:  # the LLM client is imported only where an endpoint is configured
    from services.agent_pool.agents.llm import LlmAgent

log = get_logger("agent_pool.campaign")

BACKENDS = {"torch": ev.BACKEND_TORCH, "compile": ev.BACKEND_COMPILE, "triton": ev.BACKEND_TRITON}
POLL_S = 5.0


@dataclass
class SlotProgress:
    best: float = 0.0
    best_id: str = ""
    since: int = 0  # results since the last new best
    results: int = 0


def progress(trials: list[Trial], min_gain: float) -> SlotProgress:
    p = SlotProgress()
    for t in sorted((t for t in trials if t.done), key=lambda t: t.result_seq):
        p.results += 1
        # a new best must beat the incumbent too: losers that lose by less (cuBLAS 0.95, 0.96, 0.97
        # on `linear`) are no progress, and must not keep the slot from its plateau
        if t.ok and t.speedup > max(p.best, 1.0) * (1 + min_gain):
            p.best, p.best_id, p.since = t.speedup, t.candidate_id, 0
        else:
            p.since += 1
    return p


def status_name(status: int) -> str:
    return ev.BenchStatus.Name(status).removeprefix("BENCH_STATUS_").lower()


def provenance(model: str, shapes: list[ev.ShapeBucket]) -> str:
    """The header line stamped on every candidate: the same kernel benchmarked for another model or
    traffic profile is another experiment, so it gets another id."""
    described = ",".join(
        f"{ev.Phase.Name(b.phase).removeprefix('PHASE_').lower()}:{b.batch_size}x{b.context_len}@{b.weight:.2f}"
        for b in shapes
    )
    return f"# polymorph: model={model} shapes={described or 'default'}\n"


@dataclass
class Deps:
    bus: Bus
    store: Store
    board: Board
    cfg: AgentPoolConfig
    search: SearchAgent
    llm: LlmAgent | None
    ledger: set[str]  # every candidate id any campaign proposed
    on_done: Callable[[CampaignRun], Awaitable[None]]


class CampaignRun:
    def __init__(self, record: CampaignRecord, trials: list[Trial], deps: Deps) -> None:
        self.record = record
        self.deps = deps
        self.cfg = deps.cfg
        self.trials = list(trials)
        self.by_id = {t.candidate_id: t for t in self.trials}
        self.exhausted: set[str] = set()
        self._spaces: dict[str, list[library.Config]] = {}
        self._wake = asyncio.Event()
        c = record.campaign
        self.header = provenance(c.model, list(c.profile.buckets))
        self.priors: dict[str, list[ev.Experience]] | None = None  # warm start: fetched once per run
        self.compile_cap = int(c.budget * self.cfg.compile_share)

    @property
    def campaign(self) -> ev.Campaign:
        return self.record.campaign

    @property
    def campaign_id(self) -> str:
        return self.campaign.campaign_id

    @property
    def in_flight(self) -> int:
        return sum(1 for t in self.trials if not t.done)

    def slot_trials(self, slot: str) -> list[Trial]:
        return [t for t in self.trials if t.slot == slot]

    def stamp(self, source: str) -> str:
        return source if source.startswith(self.header) else self.header + source

    # -- the loop ---------------------------------------------------------------------------------
    async def run(self) -> None:
        failing_since: float | None = None  # a bus hiccup is retried; steps failing for long end the campaign
        while True:
            try:
                if await self._step():
                    return
                failing_since = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # state is in KV: try again shortly
                now = time.monotonic()
                if failing_since is None:
                    failing_since = now
                    log.exception("campaign step failed; retrying", campaign=self.campaign_id)
                else:
                    log.warning("campaign step failed again", campaign=self.campaign_id,
                                failing_s=round(now - failing_since), error=f"{type(exc).__name__}: {exc}")
                if now - failing_since >= self.cfg.step_failure_s and await self._fail(
                        f"failed: its steps kept failing for {now - failing_since:.0f} s; last: "
                        f"{type(exc).__name__}: {exc}"[:1000]):
                    return
                await asyncio.sleep(1.0)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=POLL_S)
            self._wake.clear()

    async def _step(self) -> bool:
        """One round; True once the campaign completed."""
        if not self.record.announced and not (self.campaign.step_us or self.campaign.profile_error):
            await self._aim()
        if self.priors is None:
            self.priors = await self._experience()
        if not self.record.announced:
            await self.deps.bus.publish(subjects.CAMPAIGN_STARTED, self.campaign, msg_id=f"{self.campaign_id}:running")
            self.record.announced = True
            await self.deps.store.put_campaign(self.record)
        await self._publish([t for t in self.trials if not t.published])
        await self._republish_waiting()
        await self._expire_lost()
        reason = self.stop_reason()
        if reason is None:
            await self._propose_more()
            reason = self.stop_reason()
        if reason is not None and self.in_flight == 0:
            await self._complete(reason)
            return True
        return False

    async def _experience(self) -> dict[str, list[ev.Experience]]:
        """What earlier campaigns won on these slots (registry.experience), most similar first: the
        search tries those configurations, or their neighbours, before exploring. Without an answer the
        campaign starts cold, and says so."""
        c = self.campaign
        if not self.cfg.warm_start:
            return {}
        request = ev.ExperienceRequest(model=c.model, hardware=self.record.hardware,
                                       slots=list(c.slots), exclude_campaign=self.campaign_id)
        try:
            reply = await self.deps.bus.request(subjects.REGISTRY_EXPERIENCE, request, ev.ExperienceReply,
                                                timeout_s=self.cfg.discover_timeout_s * 5)
        except Exception as exc:
            log.info("starting cold: the registry did not answer registry.experience", campaign=self.campaign_id,
                     error=type(exc).__name__)
            return {}
        if reply.error:
            log.warning("starting cold: registry.experience failed", campaign=self.campaign_id, error=reply.error)
            return {}
        out: dict[str, list[ev.Experience]] = {}
        for item in reply.items:
            out.setdefault(item.slot, []).append(item)
        log.info("warm start", campaign=self.campaign_id, hardware=request.hardware,
                 priors={slot: len(items) for slot, items in out.items()})
        return out

    async def _aim(self) -> None:
        """Profile the live step once, before anything is proposed; kept in the record (a resumed
        campaign keeps its shares) and announced with the campaign."""
        c = self.campaign
        if not self.cfg.aim:
            c.profile_error = "off (POLYMORPH_AGENT_AIM=off)"
        else:
            try:
                reply = await aim.profile_step(self.deps.bus, c.model, list(c.profile.buckets),
                                               self.cfg.profile_timeout_s)
                c.step_shares.extend(aim.step_shares(reply, list(c.slots)))
                c.step_us = reply.step_us
                log.info("step profiled", campaign=self.campaign_id, step_us=round(c.step_us, 1),
                         shares={s.slot: round(s.share, 3) for s in c.step_shares},
                         headroom={s.slot: round(s.headroom, 3) for s in c.step_shares})
            except aim.NoProfile as exc:
                c.profile_error = str(exc) or type(exc).__name__
                log.warning("step not profiled; the budget is shared evenly", campaign=self.campaign_id,
                            reason=c.profile_error)
        await self.deps.store.put_campaign(self.record)

    @property
    def weights(self) -> dict[str, float]:
        return aim.weights(list(self.campaign.step_shares), list(self.campaign.slots))

    def stop_reason(self) -> str | None:
        """Why proposing stopped (budget, plateau, exhausted), or None while it goes on."""
        if len(self.trials) >= self.campaign.budget:
            return "budget"
        reasons = {self.slot_stop(s) for s in self.campaign.slots}
        if None in reasons:
            return None
        return next(r for r in ("plateau", "budget", "exhausted") if r in reasons)

    def slot_stop(self, slot: str) -> str | None:
        """Why a slot stopped proposing: exhausted (nothing left), budget (its own cap), plateau."""
        if slot in self.exhausted:
            return "exhausted"
        trials = self.slot_trials(slot)
        if self.cfg.slot_budget and len(trials) >= self.cfg.slot_budget:
            return "budget"
        p = progress(trials, self.cfg.min_gain)
        return "plateau" if p.results > 0 and p.since >= self.cfg.plateau else None

    def _active_slots(self) -> list[str]:
        return [s for s in self.campaign.slots if self.slot_stop(s) is None]

    async def _propose_more(self) -> None:
        new: list[Trial] = []
        while self.in_flight < self.cfg.in_flight and len(self.trials) < self.campaign.budget:
            active = self._active_slots()
            if not active:
                break
            slot = aim.next_slot(active, {s: len(self.slot_trials(s)) for s in active}, self.weights)
            proposals = await self._ask(slot)
            if not proposals:
                self.exhausted.add(slot)
                log.info("slot exhausted", campaign=self.campaign_id, slot=slot)
                continue
            trial = self._add(proposals[0])
            if trial is None:  # agents never repeat a candidate; if one did, stop asking for this slot
                log.warning("agent repeated a candidate", campaign=self.campaign_id, slot=slot)
                self.exhausted.add(slot)
                continue
            new.append(trial)
        if new:
            for trial in new:
                await self.deps.store.put_trial(self.campaign_id, trial)
            await self.deps.store.put_campaign(self._with_count())
            await self._publish(new)

    async def _ask(self, slot: str) -> list[Proposal]:
        ctx = self.context(slot)
        llm = self.deps.llm
        if llm is not None and slot in SLOTS and llm.available(self.campaign_id):  # its prompt knows slots only
            made = sum(1 for t in ctx.trials if t.agent == llm.name)
            if made < self.cfg.llm.share * (len(ctx.trials) + 1):
                proposals = await llm.propose(ctx, 1)
                for note in llm.drain_notes():
                    await self.deps.board.post(note)
                if proposals:
                    return proposals
        return await self.deps.search.propose(self.context(slot), 1)

    def context(self, slot: str) -> SlotContext:
        if slot not in self._spaces:
            self._spaces[slot] = library.space(slot, triton=self.record.triton)
        compiled = sum(1 for t in self.trials if t.params.get("backend") == "compile")
        c = self.campaign
        return SlotContext(
            campaign_id=self.campaign_id, slot=slot, model=c.model, shapes=list(c.profile.buckets),
            space=self._spaces[slot], trials=self.slot_trials(slot), notes=self.deps.board.notes(slot),
            excluded=self.deps.ledger, stamp=self.stamp, compile_left=self.compile_cap - compiled,
            seed=self.cfg.seed, priors=list((self.priors or {}).get(slot, [])), hardware=self.record.hardware,
        )

    def _add(self, proposal: Proposal) -> Trial | None:
        cid = library.candidate_id(proposal.slot, proposal.source)
        if cid in self.by_id or cid in self.deps.ledger:
            return None  # an agent must never repeat a candidate; guard anyway
        trial = Trial(
            candidate_id=cid, slot=proposal.slot, params=dict(proposal.params), agent=proposal.agent,
            source=proposal.source, parent_id=proposal.parent_id, created_unix=time.time(),
        )
        self.trials.append(trial)
        self.by_id[cid] = trial
        self.deps.ledger.add(cid)
        return trial

    def _with_count(self) -> CampaignRecord:
        self.campaign.proposed = len(self.trials)
        return self.record

    async def _publish(self, trials: list[Trial]) -> None:
        for trial in trials:
            candidate = self.candidate(trial)
            if await self.deps.bus.publish(subjects.CANDIDATES_PROPOSED, candidate, msg_id=trial.candidate_id):
                metrics.CANDIDATES_PROPOSED.labels(trial.slot, trial.agent).inc()
            trial.published = True
            await self.deps.store.put_trial(self.campaign_id, trial)

    def candidate(self, trial: Trial) -> ev.Candidate:
        c = self.campaign
        return ev.Candidate(
            candidate_id=trial.candidate_id, campaign_id=self.campaign_id, slot=trial.slot,
            backend=BACKENDS.get(trial.params.get("backend", "torch"), ev.BACKEND_TORCH),
            source=trial.source, agent=trial.agent, params=trial.params, model=c.model,
            parent_id=trial.parent_id, created_unix=trial.created_unix, shapes=list(c.profile.buckets),
        )

    # -- feedback ---------------------------------------------------------------------------------
    async def record_result(self, result: ev.BenchmarkResult) -> bool:
        """Take one BenchmarkResult for this campaign; False when it is not one of our candidates."""
        trial = self.by_id.get(result.candidate_id)
        if trial is None:
            return False
        status = OK if result.status == ev.BENCH_STATUS_OK else status_name(result.status)
        if trial.done and trial.status != LOST:
            await self.deps.store.put_trial(self.campaign_id, trial)  # redelivery: make sure it is stored
            return True
        before = progress(self.slot_trials(trial.slot), self.cfg.min_gain).best
        self._finish(trial, status, result.speedup if status == OK else 0.0, result.reason)
        await self.deps.store.put_trial(self.campaign_id, trial)
        improved = trial.ok and trial.speedup > before * (1 + self.cfg.min_gain)
        await self._share(trial, improved)
        self._wake.set()
        return True

    def _finish(self, trial: Trial, status: str, speedup: float, reason: str) -> None:
        trial.status, trial.speedup, trial.reason = status, speedup, reason
        trial.result_seq = 1 + max((t.result_seq for t in self.trials), default=0)

    async def _share(self, trial: Trial, improved: bool) -> None:
        ctx = self.context(trial.slot)
        agents: list[Agent] = [self.deps.search] + ([self.deps.llm] if self.deps.llm else [])
        for agent in agents:
            for note in agent.notes_for(ctx, trial, improved):
                await self.deps.board.post(note)

    async def _republish_waiting(self) -> None:
        """A candidate whose result is long overdue is proposed again under a new message id: a delivery
        that JetStream gave up on (an engine that kept failing on it while restarting) is not redelivered
        by itself. The engine answers a candidate it already benchmarked from its result store."""
        now = time.time()
        for trial in self.trials:
            due = trial.created_unix + self.cfg.republish_s * (trial.republished + 1)
            if trial.done or not trial.published or now < due:
                continue
            trial.republished += 1
            await self.deps.store.put_trial(self.campaign_id, trial)
            await self.deps.bus.publish(subjects.CANDIDATES_PROPOSED, self.candidate(trial),
                                        msg_id=f"{trial.candidate_id}:again{trial.republished}")
            metrics.CANDIDATES_REPUBLISHED.labels(trial.slot).inc()
            log.warning("no result yet; candidate proposed again", campaign=self.campaign_id,
                        candidate=trial.candidate_id, waited_s=round(now - trial.created_unix),
                        times=trial.republished)

    async def _expire_lost(self) -> None:
        deadline = time.time() - self.cfg.result_timeout_s
        for trial in self.trials:
            if not trial.done and trial.published and trial.created_unix < deadline:
                self._finish(trial, LOST, 0.0, f"no benchmark result within {self.cfg.result_timeout_s:.0f} s")
                await self.deps.store.put_trial(self.campaign_id, trial)
                log.warning("candidate lost", campaign=self.campaign_id, candidate=trial.candidate_id)

    # -- the end ----------------------------------------------------------------------------------
    async def _complete(self, reason: str) -> None:
        c = self.campaign
        c.state = ev.CAMPAIGN_STATE_COMPLETED
        c.stop_reason = reason
        c.proposed = len(self.trials)
        c.finished_unix = c.finished_unix or time.time()
        for slot in c.slots:
            await self.deps.board.post(self._summary(slot, reason))
        await self.deps.bus.publish(subjects.CAMPAIGN_COMPLETED, c, msg_id=f"{self.campaign_id}:completed")
        self.record.status = COMPLETED
        await self.deps.store.put_campaign(self.record)
        log.info("campaign completed", campaign=self.campaign_id, reason=reason, proposed=c.proposed)
        await self.deps.on_done(self)

    async def _fail(self, reason: str) -> bool:
        """End as failed with `reason`; False when even that could not be announced (retried later)."""
        c = self.campaign
        c.state = ev.CAMPAIGN_STATE_FAILED
        c.stop_reason = reason
        c.proposed = len(self.trials)
        c.finished_unix = c.finished_unix or time.time()
        try:
            await self.deps.bus.publish(subjects.CAMPAIGN_FAILED, c, msg_id=f"{self.campaign_id}:failed")
            self.record.status = FAILED
            await self.deps.store.put_campaign(self.record)
        except Exception as exc:
            log.warning("could not announce the campaign's failure yet", campaign=self.campaign_id, error=str(exc))
            return False
        log.error("campaign failed", campaign=self.campaign_id, reason=reason)
        await self.deps.on_done(self)
        return True

    def _summary(self, slot: str, reason: str) -> ev.BoardNote:
        trials = self.slot_trials(slot)
        p = progress(trials, self.cfg.min_gain)
        why = self.slot_stop(slot) or reason
        failed = sum(1 for t in trials if t.done and not t.ok)
        best = self.by_id.get(p.best_id)
        text = (
            f"{slot}: stopped ({why}) after {len(trials)} candidates, {failed} failed; "
            + (f"best {p.best:.3f}x with {' '.join(f'{k}={v}' for k, v in sorted(best.params.items()))}"
               if best else "nothing ran successfully")
        )
        return ev.BoardNote(
            note_id=f"{self.campaign_id}.summary.{slot}", campaign_id=self.campaign_id, agent="campaign",
            slot=slot, text=text, params=best.params if best else {}, score=p.best, created_unix=time.time(),
        )

    def wake(self) -> None:
        self._wake.set()
