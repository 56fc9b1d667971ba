"""The registry's gauges follow what its tables hold, also across a restart (read from DuckDB, not counted
from messages: a redelivery adds nothing)."""

from __future__ import annotations

import asyncio

from services.common import metrics
from services.common.bus import Bus
from tests.helpers import wait_for
from tests.registry.conftest import RunningRegistry
from tests.registry.helpers import wait_sql
from tests.registry.test_store import COUNTS, EXPECTED, loop_messages, publish_all


def _value(name: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, labels)


async def test_gauges_show_the_tables_and_survive_a_restart_and_redelivery(registry: RunningRegistry,
                                                                           bus: Bus) -> None:
    await publish_all(bus, loop_messages())
    await wait_sql(bus, COUNTS, EXPECTED)
    await wait_for(lambda: _value("polymorph_registry_rows", table="board_notes") == 1)
    assert _value("polymorph_registry_rows", table="events") == 9
    assert _value("polymorph_registry_rows", table="candidates") == 2
    assert _value("polymorph_registry_benchmarks", status="ok") == 1
    assert _value("polymorph_registry_benchmarks", status="crashed") == 1
    assert _value("polymorph_registry_verdicts", status="failed", stage="captured") == 1
    assert _value("polymorph_registry_decisions", decision="rejected") == 1

    await registry.stop()
    metrics.REGISTRY_ROWS.set({})
    await registry.start()  # a fresh process would start from nothing: the gauges come from the file
    assert _value("polymorph_registry_rows", table="candidates") == 2
    board = {"subject": "board.>", "durable": "registry-board", "outcome": "handled"}
    before = _value("polymorph_bus_messages_total", **board) or 0
    await publish_all(bus, loop_messages(), suffix=":again")  # delivered again (new ids), stored once
    await wait_for(lambda: (_value("polymorph_bus_messages_total", **board) or 0) == before + 1)
    await asyncio.sleep(1.0)  # past the refresh that follows a commit
    assert _value("polymorph_registry_rows", table="events") == 9
    assert _value("polymorph_registry_rows", table="candidates") == 2
