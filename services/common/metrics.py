"""Prometheus metrics: every metric of every service is named here, and each process serves its own.

The runner starts the endpoint once the service is up (so a healthcheck on /metrics means ready), on
POLYMORPH_<SERVICE>_METRICS_PORT (e.g. POLYMORPH_REGISTRY_METRICS_PORT), else POLYMORPH_METRICS_PORT
(one port for every container of a compose deployment), else any free port, at POLYMORPH_METRICS_HOST
(127.0.0.1; 0.0.0.0 inside a container network). The URL it got is logged and written to
<data dir>/metrics/<service>.url, where `polymorph up` finds it.

Counters count what this process did since it started; gauges show a state: a consumer's backlog, what
the registry's tables hold (read from DuckDB, so a restart or a redelivery never skews them), the
agent pool's campaigns.
"""

from __future__ import annotations

import os
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from services.common.config import Env

REGISTRY = CollectorRegistry()  # ours, not the library's default: nothing else registers here
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

Values = Mapping[tuple[str, ...], float]  # label values → sample


class Sampled(Collector):
    """A gauge family read whole at each scrape (from another thread): the latest `set`, or a `follow`ed
    function. Labels that vanished from the state vanish from the family, which a plain Gauge keeps."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...]) -> None:
        self.name, self.documentation, self.labels = name, documentation, list(labels)
        self._read: Callable[[], Values] = dict
        REGISTRY.register(self)

    def set(self, values: Values) -> None:
        frozen = dict(values)
        self._read = lambda: frozen

    def follow(self, read: Callable[[], Values]) -> None:
        self._read = read

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(self.name, self.documentation, labels=self.labels)]

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.labels)
        for labels, value in self._read().items():
            family.add_metric(list(labels), value)
        return [family]


def tally(values: Iterable[str]) -> Values:
    """'running', 'running', 'queued' → {('running',): 2, ('queued',): 1}."""
    return {(value,): float(n) for value, n in Tally(values).items()}


def enum_label(enum: Any, value: int) -> str:
    """ev.BenchStatus, 1 → 'ok': the value's name without the enum's prefix, lower case."""
    prefix = enum.keys()[0].removesuffix("UNSPECIFIED")  # buf style: the zero value is *_UNSPECIFIED
    try:
        return enum.Name(value).removeprefix(prefix).lower()
    except ValueError:
        return f"unknown_{value}"


# -- the bus (bus.py): every message of every service passes here ---------------------------------
# subject is the consumer's filter (board.> for every board.<campaign>), durable '' a core subscription
BUS_MESSAGES = Counter("polymorph_bus_messages", "Messages consumed, by how their handler ended: handled, "
                       "poison (terminated, never redelivered) or retry (nak, redelivered later)",
                       ["subject", "durable", "outcome"], registry=REGISTRY)
BUS_REDELIVERED = Counter("polymorph_bus_redelivered", "Deliveries of a message JetStream had delivered before",
                          ["subject", "durable"], registry=REGISTRY)
BUS_HANDLER_SECONDS = Histogram("polymorph_bus_handler_seconds", "Time a handler took per message",
                                ["subject", "durable"], registry=REGISTRY,
                                buckets=(0.001, 0.005, 0.02, 0.1, 0.5, 2.0, 10.0, 30.0, 120.0, 600.0))
BUS_PENDING = Gauge("polymorph_bus_pending", "Messages not yet delivered to this consumer at its latest "
                    "delivery (JetStream num_pending): its queue lag", ["subject", "durable"], registry=REGISTRY)
BUS_PUBLISHED = Counter("polymorph_bus_published", "Durable publishes by stream; duplicate=true: dropped by "
                        "the stream's de-duplication window", ["stream", "duplicate"], registry=REGISTRY)
BUS_REQUESTS = Counter("polymorph_bus_requests", "Requests answered (SQL, export, campaign start), by "
                       "outcome: ok, error, malformed", ["subject", "outcome"], registry=REGISTRY)

# -- signed promotions: the registry's own history and every engine host refuse what does not verify
KERNEL_EVENTS_REFUSED = Counter("polymorph_kernel_events_refused", "kernel.promoted / kernel.demoted refused: "
                                "unsigned, forged or altered", ["subject"], registry=REGISTRY)

# -- registry: what DuckDB holds, sampled after every committed message ----------------------------
REGISTRY_ROWS = Sampled("polymorph_registry_rows", "Rows per registry table", ("table",))
REGISTRY_BENCHMARKS = Sampled("polymorph_registry_benchmarks", "Stored benchmarks by status", ("status",))
REGISTRY_VERDICTS = Sampled("polymorph_registry_verdicts", "Stored verdicts by status and the stage a failure "
                            "stopped at ('' for a pass)", ("status", "stage"))
REGISTRY_DECISIONS = Sampled("polymorph_registry_decisions", "Verdicts by the registry's decision: promoted, "
                             "rejected, demoted", ("decision",))
REGISTRY_PROMOTIONS = Sampled("polymorph_registry_promotions", "Promotions by state: active, replaced (by a "
                              "faster one), demoted (a later check failed)", ("state",))

# -- agent pool --------------------------------------------------------------------------------------
CAMPAIGNS = Sampled("polymorph_campaigns", "The agent pool's campaigns by state: queued, running, completed, "
                    "superseded", ("state",))
CANDIDATES_PROPOSED = Counter("polymorph_candidates_proposed", "Candidates published on candidates.proposed "
                              "(a re-publish after a restart not counted)", ["slot", "agent"], registry=REGISTRY)

CANDIDATES_REPUBLISHED = Counter("polymorph_candidates_republished", "Candidates proposed again because their "
                                 "result was overdue", ["slot"], registry=REGISTRY)

# -- engine host, verifier, traffic profiler ------------------------------------------------------------
ENGINE_BENCHMARKS = Counter("polymorph_engine_benchmarks", "Benchmarks run, by tier and status (ok, raised, "
                            "crashed, timeout, ...)", ["tier", "status"], registry=REGISTRY)
VERIFIER_VERDICTS = Counter("polymorph_verifier_verdicts", "Verdicts reached, by status and the stage that "
                            "stopped a failure ('' for a pass)", ["status", "stage"], registry=REGISTRY)
TRAFFIC_REQUESTS = Counter("polymorph_traffic_requests", "Request records the profiler observed",
                           registry=REGISTRY)
TRAFFIC_MALFORMED = Counter("polymorph_traffic_malformed", "Request records that decode but cannot be used",
                            registry=REGISTRY)
TRAFFIC_DRIFTS = Counter("polymorph_traffic_drifts", "Drift events published on traffic.drift", registry=REGISTRY)


# -- the endpoint -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MetricsSettings:
    host: str  # bind address
    port: int  # 0: any free port

    @classmethod
    def from_env(cls, env: Env, service: str) -> MetricsSettings:
        port = env.int(f"{service.upper()}_METRICS_PORT", env.int("METRICS_PORT", 0))
        return cls(host=env.str("METRICS_HOST", "127.0.0.1"), port=port)


def url_file(data_dir: Path, service: str) -> Path:
    """Where a running service says its endpoint is."""
    return data_dir / "metrics" / f"{service}.url"


@dataclass
class Endpoint:
    url: str
    file: Path
    server: Any  # wsgiref's server, run by a daemon thread

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.file.unlink(missing_ok=True)


def serve(settings: MetricsSettings, service: str, data_dir: Path) -> Endpoint:
    server, _ = start_http_server(settings.port, settings.host, registry=REGISTRY)
    host = "127.0.0.1" if settings.host in ("", "0.0.0.0", "::") else settings.host
    host = f"[{host}]" if ":" in host else host
    url = f"http://{host}:{server.server_port}/metrics"
    path = url_file(data_dir, service)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(url + "\n")
    tmp.replace(path)  # a reader never sees half a URL
    return Endpoint(url, path, server)

