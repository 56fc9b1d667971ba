"""Shared by the verifier tests: message builders, polling, and a real engine host process."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common.bus import Bus
from services.common.slot_specs import candidate_id as content_id
from services.verifier.engine_client import EngineClient, EngineUnavailable

REPO = Path(__file__).resolve().parents[2]
ENGINE_MAIN = REPO / "services" / "engine_host" / "__main__.py"
MODEL = "llama-tiny"
CANDIDATE_TIMEOUT_S = 6  # the hang case waits this long, then the worker is restarted


@dataclass
class EngineHost:
    nats_url: str
    address: str
    data_dir: Path
    process: subprocess.Popen


async def discover_engine(url: str, process: subprocess.Popen, log_path: Path, timeout_s: float = 240.0) -> str:
    bus = await Bus.connect(url, "verifier-tests")
    try:
        client = EngineClient(bus, MODEL, discover_timeout_s=1.0)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                await client.stub()
                assert client._address is not None
                return client._address
            except EngineUnavailable:
                if process.poll() is not None:
                    raise RuntimeError(f"engine host exited ({process.returncode}); see {log_path}") from None
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
    finally:
        await bus.close()


def stop_process(process: subprocess.Popen, timeout_s: float = 30.0) -> int:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


async def wait_for(predicate: Callable[[], object], timeout_s: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


def candidate(source: str, slot: str = "rmsnorm") -> ev.Candidate:
    return ev.Candidate(candidate_id=content_id(slot, source), campaign_id="camp-1", slot=slot, source=source,
                        backend=ev.BACKEND_TORCH, model="llama-tiny")


def benchmark(cand: ev.Candidate, *, status: int = ev.BENCH_STATUS_OK, lo: float = 1.2) -> ev.BenchmarkResult:
    return ev.BenchmarkResult(candidate_id=cand.candidate_id, campaign_id=cand.campaign_id, slot=cand.slot,
                              status=status, speedup=1.5, speedup_lo=lo, speedup_hi=1.8,
                              speedup_vs_reference=1.5, hardware="test-cpu", model="llama-tiny")
