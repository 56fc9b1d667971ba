"""The classical search agent: seeded local search over a slot's template grid, steered by feedback.

Each untried configuration gets a predicted speedup from the evidence so far: the best measured
speedup among configurations it resembles, shrunk by DECAY per differing choice (so the neighbours of
a fast configuration come first), and cut by FAIL_FACTOR for every choice that has only ever failed.
Board notes from other agents and campaigns count as weaker evidence (NOTE_WEIGHT). With probability
`explore`, or while nothing has beaten the incumbent yet, the agent explores instead: it picks the torch
configuration whose choices have been tried least. Compiled variants are never explored blindly
(a cold compile costs tens of seconds): they appear as neighbours of configurations that worked, or,
when no eager configuration has beaten the incumbent after a few tries, as the compiled twin of the
best one; only while the campaign's compile allowance lasts.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.agent_pool.agents.base import LOST, Proposal, SlotContext, Trial
from services.agent_pool.library import Config

DECAY = 0.8
NOTE_WEIGHT = 0.6
# earlier campaigns' measured winners: strong evidence on the same hardware and model, weaker elsewhere
PRIOR_WEIGHT = {(True, True): 0.9, (True, False): 0.75, (False, True): 0.5, (False, False): 0.4}
FAIL_FACTOR = 0.3
MIN_EAGER_BEFORE_COMPILE = 3


@dataclass(frozen=True)
class Evidence:
    params: dict[str, str]
    speedup: float  # 0 for a failure
    weight: float
    candidate_id: str = ""  # set for this campaign's own trials (a proposal's parent)


def distance(a: dict[str, str], b: dict[str, str]) -> int:
    """How many choices differ (a key only one side has counts as a difference)."""
    return sum(1 for k in set(a) | set(b) if a.get(k) != b.get(k))


class SearchAgent:
    name = "search"

    def __init__(self, explore: float = 0.25) -> None:
        self.explore = explore

    # -- proposing -------------------------------------------------------------------------------
    async def propose(self, ctx: SlotContext, n: int) -> list[Proposal]:
        taken = set(ctx.excluded) | {t.candidate_id for t in ctx.trials}
        untried = [c for c in ctx.space if ctx.candidate_id(c.source) not in taken]
        rng = random.Random(f"{ctx.seed}:{ctx.campaign_id}:{ctx.slot}:{len(ctx.trials)}")
        evidence = self._evidence(ctx)
        # Only configurations that beat the incumbent are worth their neighbours; until one does, explore.
        positives = [e for e in evidence if e.speedup > 1.0]
        failed = self._failed_values(evidence)
        usage = Counter((k, v) for t in ctx.trials for k, v in t.params.items())
        compile_left = ctx.compile_left
        out: list[Proposal] = []
        while untried and len(out) < n:
            allowed = [c for c in untried if c.backend != "compile" or compile_left > 0]
            if not allowed:
                break
            explore = not positives or rng.random() < self.explore
            twin = self._compile_twin(ctx, allowed) if not positives and compile_left > 0 else None
            if twin is not None:
                config, parent = twin
            elif explore:
                config, parent = self._explore(allowed, usage, failed, rng), ""
            else:
                config, parent = self._exploit(allowed, positives, failed, rng)
            untried.remove(config)
            params = config.param_dict
            usage.update(params.items())
            compile_left -= config.backend == "compile"
            out.append(Proposal(ctx.slot, ctx.stamp(config.source), params, self.name, parent))
        return out

    @staticmethod
    def _compile_twin(ctx: SlotContext, allowed: list[Config]) -> tuple[Config, str] | None:
        """Once eager formulations alone have not beaten the incumbent, fuse the best of them.

        On hardware where every eager op is a separate pass over memory, no rewrite of the op
        sequence wins; compiling the fastest one into a single kernel might. Worth one (costly) try.
        """
        measured = [t for t in ctx.trials if t.ok and t.params.get("backend") != "compile"]
        if len(measured) < MIN_EAGER_BEFORE_COMPILE:
            return None
        best = max(measured, key=lambda t: t.speedup)
        want = {**best.params, "backend": "compile"}
        for config in allowed:
            if config.backend == "compile" and config.param_dict == want:
                return config, best.candidate_id
        return None

    def _evidence(self, ctx: SlotContext) -> list[Evidence]:
        evidence = [
            Evidence(t.params, t.speedup if t.ok else 0.0, 1.0, t.candidate_id)
            for t in ctx.trials
            if t.done and t.status != LOST
        ]
        for prior in ctx.priors:
            weight = PRIOR_WEIGHT[(prior.hardware == ctx.hardware, prior.model == ctx.model)]
            evidence.append(Evidence(dict(prior.params), prior.speedup, weight))
        for note in ctx.notes:
            if note.slot != ctx.slot or not note.params:
                continue
            if note.campaign_id == ctx.campaign_id and note.agent == self.name:
                continue  # our own notes restate our trials
            evidence.append(Evidence(dict(note.params), max(note.score, 0.0), NOTE_WEIGHT))
        return evidence

    @staticmethod
    def _failed_values(evidence: list[Evidence]) -> set[tuple[str, str]]:
        """Choices seen in failures and never in a success."""
        bad = {kv for e in evidence if e.speedup <= 0 for kv in e.params.items()}
        good = {kv for e in evidence if e.speedup > 0 for kv in e.params.items()}
        return bad - good

    @staticmethod
    def _penalty(config: Config, failed: set[tuple[str, str]]) -> float:
        hits = sum(1 for kv in config.params if kv in failed)
        return FAIL_FACTOR**hits

    def _explore(
        self, allowed: list[Config], usage: Counter, failed: set[tuple[str, str]], rng: random.Random
    ) -> Config:
        pool = [c for c in allowed if c.backend != "compile"] or allowed

        def novelty(c: Config) -> float:
            return sum(1.0 / (1 + usage[kv]) for kv in c.params) * self._penalty(c, failed) + rng.random() * 1e-3

        return max(pool, key=novelty)

    def _exploit(
        self, allowed: list[Config], positives: list[Evidence], failed: set[tuple[str, str]], rng: random.Random
    ) -> tuple[Config, str]:
        best: tuple[float, Config, str] | None = None
        for config in allowed:
            params = config.param_dict
            score, parent = 0.0, ""
            for e in positives:
                s = e.weight * e.speedup * DECAY ** distance(params, e.params)
                if s > score:
                    score, parent = s, e.candidate_id
            score = score * self._penalty(config, failed) + rng.random() * 1e-6  # seeded tie-break
            if best is None or score > best[0]:
                best = (score, config, parent)
        assert best is not None
        return best[1], best[2]

    # -- sharing ---------------------------------------------------------------------------------
    def notes_for(self, ctx: SlotContext, trial: Trial, improved: bool) -> list[ev.BoardNote]:
        if trial.agent != self.name or trial.status == LOST:
            return []
        described = " ".join(f"{k}={v}" for k, v in sorted(trial.params.items()))
        if trial.ok and improved:
            text = f"{ctx.slot}: {trial.speedup:.3f}x with {described} (new best in this campaign)"
            score = trial.speedup
        elif not trial.ok:
            text = f"{ctx.slot}: failed ({trial.status}) with {described}: {trial.reason[:300]}"
            score = 0.0
        else:
            return []
        return [
            ev.BoardNote(
                note_id=f"{ctx.campaign_id}.{self.name}.{trial.candidate_id}",
                campaign_id=ctx.campaign_id, agent=self.name, slot=ctx.slot, text=text,
                params=trial.params, score=score, created_unix=time.time(),
            )
        ]

    def drain_notes(self) -> list[ev.BoardNote]:
        return []
