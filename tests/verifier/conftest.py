"""A real engine host for the benchmark and stages 2-4: `python -m services.engine_host` on its own
nats-server, both tiers (the fast one benchmarks, the slow one verifies).

One engine for the whole session (starting it is the expensive part). It does not consume
candidates.proposed, so the tests are the only thing driving it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from services.common.nats_server import EmbeddedNats
from tests.verifier.helpers import (
    CANDIDATE_TIMEOUT_S,
    ENGINE_MAIN,
    MODEL,
    REPO,
    EngineHost,
    discover_engine,
    stop_process,
)


@pytest.fixture(scope="session")
def engine_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineHost]:
    if not ENGINE_MAIN.exists():
        pytest.skip("stages 2-4 need a real engine host: services/engine_host/__main__.py does not exist yet")
    root = tmp_path_factory.mktemp("engine")
    nats = EmbeddedNats(root / "nats", max_memory="64MB", max_storage="1GB")
    url = nats.start()
    env = {
        **os.environ,
        "POLYMORPH_NATS_URL": url,
        "POLYMORPH_DATA_DIR": str(root / "data"),
        "POLYMORPH_MODEL": MODEL,
        "POLYMORPH_ENGINE_TIERS": "fast,slow",
        "POLYMORPH_ENGINE_ROUNDS": "4",
        "POLYMORPH_ENGINE_SAMPLES": "3",
        "POLYMORPH_ENGINE_SAMPLE_S": "0.0005",
        "POLYMORPH_ENGINE_DEFAULT_SHAPES": "decode:1:64:0.6,decode:4:96:0.4",
        "POLYMORPH_ENGINE_CONSUME": "false",
        "POLYMORPH_ENGINE_CANDIDATE_TIMEOUT_S": str(CANDIDATE_TIMEOUT_S),
        "POLYMORPH_LOG_LEVEL": "warning",
    }
    log_path = root / "engine_host.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "services.engine_host"], cwd=REPO, env=env,
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        address = asyncio.run(discover_engine(url, process, log_path))
        yield EngineHost(url, address, root / "data", process)
    finally:
        stop_process(process)
        nats.stop()
