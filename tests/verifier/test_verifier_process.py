"""`python -m services.verifier` as its own process, driving the real engine host it discovers on NATS."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Bus
from tests.verifier.adversarial_cases import CASES, HONEST_RMSNORM
from tests.verifier.helpers import MODEL, REPO, EngineHost, benchmark, candidate, stop_process


async def test_verifier_process_end_to_end(engine_host: EngineHost, tmp_path: Path) -> None:
    env = {**os.environ, "POLYMORPH_NATS_URL": engine_host.nats_url, "POLYMORPH_DATA_DIR": str(tmp_path / "data"),
           "POLYMORPH_MODEL": MODEL, "POLYMORPH_LOG_LEVEL": "info"}
    log_path = tmp_path / "verifier.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "services.verifier"], cwd=REPO, env=env,
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    bus = await Bus.connect(engine_host.nats_url, "verifier-process-test")
    verdicts: dict[str, list[ev.Verdict]] = {}

    async def on_verdict(v: ev.Verdict) -> None:
        verdicts.setdefault(v.candidate_id, []).append(v)

    async def wait_verdicts(cid: str, count: int = 1, timeout_s: float = 120.0) -> list[ev.Verdict]:
        for _ in range(int(timeout_s * 10)):
            if len(verdicts.get(cid, [])) >= count:
                return verdicts[cid]
            assert process.poll() is None, f"verifier exited; see {log_path}"
            await asyncio.sleep(0.1)
        raise AssertionError(f"no verdict for {cid}; see {log_path}")

    try:
        await bus.subscribe(subjects.CANDIDATES_VERIFIED, ev.Verdict, on_verdict)
        honest = candidate(HONEST_RMSNORM)
        nan = candidate(next(c.source for c in CASES if c.name == "nan_output"))
        await bus.publish(subjects.CANDIDATES_BENCHMARKED, benchmark(honest), msg_id=honest.candidate_id)
        for cand in (honest, nan):  # the honest benchmark arrived first: the verifier retries until this
            await bus.publish(subjects.CANDIDATES_PROPOSED, cand, msg_id=cand.candidate_id)
        await bus.publish(subjects.CANDIDATES_BENCHMARKED, benchmark(nan), msg_id=nan.candidate_id)

        passed = (await wait_verdicts(honest.candidate_id))[0]
        assert passed.status == ev.VERDICT_STATUS_PASSED, passed.reason
        assert [c.stage for c in passed.checks] == ["static", "load", "captured", "random", "race", "end_to_end"]
        assert passed.failed_stage == "" and passed.speedup_lo == 1.2 and passed.verify_s > 0

        failed = (await wait_verdicts(nan.candidate_id))[0]
        assert failed.status == ev.VERDICT_STATUS_FAILED and failed.failed_stage == "captured"
        assert "NaN/Inf" in failed.reason

        # redelivery of an already-verdicted benchmark: the same verdict again, not a new verification
        await bus.publish(subjects.CANDIDATES_BENCHMARKED, benchmark(honest), msg_id=honest.candidate_id + ":2")
        again = await wait_verdicts(honest.candidate_id, count=2)
        assert again[1] == passed
    finally:
        await bus.close()
        code = stop_process(process)
    assert code == 0, f"verifier did not stop cleanly on SIGTERM; see {log_path}"
