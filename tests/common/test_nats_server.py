"""The embedded nats-server's HTTP monitoring: on 127.0.0.1 only, at a port it reports."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from services.common.nats_server import EmbeddedNats


def test_monitoring_answers_on_loopback_at_the_port_it_reports(tmp_path: Path) -> None:
    with EmbeddedNats(tmp_path / "nats", max_memory="64MB", max_storage="1GB", monitor_port=-1) as server:
        assert server.monitor_url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"{server.monitor_url}/varz", timeout=5) as response:
            varz = json.loads(response.read())
        assert varz["http_host"] == "127.0.0.1" and varz["jetstream"]
        with urllib.request.urlopen(f"{server.monitor_url}/healthz", timeout=5) as response:
            assert json.loads(response.read())["status"] == "ok"


def test_monitoring_is_off_unless_asked_for(tmp_path: Path) -> None:
    with EmbeddedNats(tmp_path / "nats", max_memory="64MB", max_storage="1GB") as server:
        assert server.monitor_url == ""
