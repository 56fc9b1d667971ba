"""The `vllm.stat_logger_plugins` entry point (vLLM loads it in the API-server process): vLLM calls
record() with each iteration's finished requests; each becomes a RequestRecord (traffic.py)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase

from services.adapters.vllm.settings import AdapterSettings
from services.adapters.vllm.traffic import TrafficPublisher, record_of
from services.common.log import get_logger

log = get_logger("adapters.vllm.traffic")


class TrafficStatLogger(StatLoggerBase):
    def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
        self.settings = AdapterSettings.from_env()
        served = getattr(vllm_config.model_config, "served_model_name", None)
        self.model = self.settings.model or (served if isinstance(served, str) else str(served or ""))
        self.publisher = TrafficPublisher(self.settings)
        self.state_file = self.settings.state_dir / f"traffic-{os.getpid()}-{engine_index}.json"
        self._written = 0.0

    def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None,
               engine_idx: int = 0) -> None:
        if iteration_stats is None:
            return
        for finished in iteration_stats.finished_requests:
            self.publisher.offer(record_of(finished, iteration_stats.iteration_timestamp, self.model,
                                           self.settings.traffic_tag))
        now = time.monotonic()
        if now - self._written > 0.5:
            self._written = now
            self._write_state()

    def _write_state(self) -> None:
        try:
            self.settings.state_dir.mkdir(parents=True, exist_ok=True)
            tmp = self.state_file.with_suffix(".tmp")
            tmp.write_text(json.dumps({"pid": os.getpid(), "model": self.model, **self.publisher.counters()}))
            os.replace(tmp, self.state_file)
        except OSError as exc:
            log.warning("traffic state not written", error=str(exc))

    def log(self) -> None:
        self._write_state()

    def log_engine_initialized(self) -> None:
        log.info("polymorph traffic records on", model=self.model, nats=bool(self.settings.nats_url))
