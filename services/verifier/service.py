"""The verifier service: benchmarked candidates that beat their incumbent in, verdicts out.

- `candidates.proposed` (durable "verifier-candidates"): keep each candidate's source, keyed by id.
- `candidates.benchmarked` (durable "verifier"): for status OK and speedup_lo above the bar, run the
  cascade on the slow-tier engine and publish `candidates.verified` (msg_id = candidate id).

Retries (nak) when the source has not arrived yet or the engine cannot be reached; a candidate that
crashes or hangs the engine worker is a FAILED verdict. Verdicts are stored, so a redelivered
benchmark republishes the verdict already reached instead of verifying again.
"""

from __future__ import annotations

import secrets
import time

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import metrics, subjects
from services.common.bus import Bus, Delivery, Poison
from services.common.config import CommonSettings, Env
from services.common.log import get_logger
from services.common.slot_specs import candidate_id
from services.verifier.cascade import CascadeSettings, build_verdict, run_cascade
from services.verifier.config import VerifierConfig
from services.verifier.engine_client import EngineClient
from services.verifier.store import ProtoStore

log = get_logger("verifier")


class SourceNotYetKnown(Exception):
    """The benchmark arrived before its candidate: retry once candidates.proposed caught up."""



class VerifierService:
    name = "verifier"

    def __init__(self, config: VerifierConfig) -> None:
        self.config = config
        self.settings = CascadeSettings.from_config(config)
        self.sources: ProtoStore[ev.Candidate] = ProtoStore(config.data_dir / "candidates", ev.Candidate)
        self.verdicts: ProtoStore[ev.Verdict] = ProtoStore(config.data_dir / "verdicts", ev.Verdict)
        self.bus: Bus | None = None
        self.engine: EngineClient | None = None

    async def start(self, bus: Bus) -> None:
        self.bus = bus
        self.engine = EngineClient(
            bus, self.config.model, address=self.config.engine_address,
            rpc_timeout_s=self.config.rpc_timeout_s, discover_timeout_s=self.config.discover_timeout_s,
        )
        await bus.consume(subjects.CANDIDATES_PROPOSED, ev.Candidate, self.on_candidate,
                          durable="verifier-candidates")
        # One at a time: a verification takes a while and must not hold unstarted messages past ack_wait.
        await bus.consume(subjects.CANDIDATES_BENCHMARKED, ev.BenchmarkResult, self.on_benchmark,
                          durable="verifier", max_deliver=self.config.max_deliver, batch=1)

    async def stop(self) -> None:
        if self.engine is not None:
            await self.engine.close()

    # -- handlers --------------------------------------------------------------------------------
    async def on_candidate(self, candidate: ev.Candidate, delivery: Delivery) -> None:
        cid = candidate.candidate_id
        if not ProtoStore.valid_key(cid):
            raise Poison(f"candidate id {cid!r} is not a valid id")
        expected = candidate_id(candidate.slot, candidate.source)
        if cid != expected:  # verifying one source and promoting another must be impossible
            raise Poison(f"candidate id {cid} is not the content hash of its slot and source ({expected})")
        if cid not in self.sources:
            self.sources.put(cid, candidate)

    async def on_benchmark(self, bench: ev.BenchmarkResult, delivery: Delivery) -> None:
        cid = bench.candidate_id
        if not ProtoStore.valid_key(cid):
            raise Poison(f"benchmark for invalid candidate id {cid!r}")
        verdict = self.verdicts.get(cid)
        if verdict is not None:
            log.info("verdict already reached; republishing", candidate_id=cid, status=_status(verdict))
            await self._publish(verdict)
            return
        if bench.status != ev.BENCH_STATUS_OK or not bench.speedup_lo > self.config.min_speedup_lo:
            log.debug("not a verification candidate", candidate_id=cid,
                      status=ev.BenchStatus.Name(bench.status), speedup_lo=bench.speedup_lo)
            return
        candidate = self.sources.get(cid)
        if candidate is None:
            if delivery.num_delivered >= self.config.candidate_deliveries:  # ~2 min of waiting: never coming
                raise Poison(f"benchmark for unknown candidate {cid}: refused")
            raise SourceNotYetKnown(f"source of candidate {cid} not seen on {subjects.CANDIDATES_PROPOSED} yet")
        if bench.slot and bench.slot != candidate.slot:
            raise Poison(f"benchmark says slot {bench.slot!r} but candidate {cid} is for {candidate.slot!r}")
        verdict = await self.verify(candidate, bench)
        self.verdicts.put(cid, verdict)  # stored first: a failed publish is redone from the store
        await self._publish(verdict)

    async def verify(self, candidate: ev.Candidate, bench: ev.BenchmarkResult) -> ev.Verdict:
        """Run the cascade (raises EngineUnavailable when the engine cannot be used: retry later)."""
        seed = secrets.randbelow(2**31 - 2) + 1  # fresh every verification; recorded in the random check
        started = time.monotonic()
        log.info("verifying", candidate_id=candidate.candidate_id, slot=candidate.slot,
                 speedup=bench.speedup, speedup_lo=bench.speedup_lo, seed=seed)
        outcome = await run_cascade(candidate, self.engine, self.settings, seed)
        verdict = build_verdict(candidate, bench, outcome, verify_s=time.monotonic() - started,
                                finished_unix=time.time())
        status = metrics.enum_label(ev.VerdictStatus, verdict.status)
        metrics.VERIFIER_VERDICTS.labels(status, verdict.failed_stage).inc()
        log.info("verdict", candidate_id=candidate.candidate_id, slot=candidate.slot, status=_status(verdict),
                 failed_stage=verdict.failed_stage, reason=verdict.reason, verify_s=round(verdict.verify_s, 3))
        return verdict

    async def _publish(self, verdict: ev.Verdict) -> None:
        assert self.bus is not None
        await self.bus.publish(subjects.CANDIDATES_VERIFIED, verdict, msg_id=verdict.candidate_id)


def _status(verdict: ev.Verdict) -> str:
    return ev.VerdictStatus.Name(verdict.status)


def build(env: Env, common: CommonSettings) -> VerifierService:
    return VerifierService(VerifierConfig.from_env(env, common))
