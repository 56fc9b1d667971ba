"""Applies the promotion policy to what is stored: reads the facts, records the decision, queues
kernel.promoted / kernel.demoted in the outbox. Runs inside the caller's transaction.
"""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.log import get_logger
from services.registry import outbox
from services.registry.policy import ActivePromotion, BenchFacts, decide_promotion, should_demote

log = get_logger("registry.promote")


class NotReady(Exception):
    """A passed verdict arrived before its candidate or benchmark: retry later (nak)."""


def _one(con: duckdb.DuckDBPyConnection, sql: str, params: list) -> tuple | None:
    return con.execute(sql, params).fetchone()


def evaluate(con: duckdb.DuckDBPyConnection, candidate_id: str, now: datetime) -> bool:
    """Decide an undecided passed verdict. Returns False when its candidate or benchmark is missing."""
    verdict = _one(con, "SELECT status, decision, hardware, model FROM verdicts WHERE candidate_id = ?",
                   [candidate_id])
    if verdict is None or verdict[0] != "passed" or verdict[1] is not None:
        return True  # nothing to decide: no verdict, a failure, or decided before
    cand = _one(con, "SELECT slot, model, backend, source, campaign_id FROM candidates WHERE candidate_id = ?",
                [candidate_id])
    bench = _one(con, "SELECT status, speedup, speedup_lo, speedup_vs_reference, incumbent_id, slot, "
                      "hardware, model FROM benchmarks WHERE candidate_id = ?", [candidate_id])
    if cand is None or bench is None:
        return False
    slot, cand_model, backend, source, campaign_id = cand
    facts = BenchFacts(status=bench[0], speedup=bench[1], speedup_lo=bench[2],
                       speedup_vs_reference=bench[3], incumbent_id=bench[4])
    slot = bench[5] or slot
    hardware = bench[6] or verdict[2] or ""
    model = bench[7] or cand_model or verdict[3] or ""
    rows = con.execute(
        "SELECT candidate_id, speedup_vs_reference FROM promotions "
        "WHERE slot = ? AND model = ? AND hardware = ? AND active "
        "ORDER BY speedup_vs_reference DESC, candidate_id", [slot, model, hardware],
    ).fetchall()
    active = ActivePromotion(rows[0][0], rows[0][1]) if rows else None
    decision = decide_promotion(candidate_id, "passed", facts, active)
    con.execute("UPDATE verdicts SET decision = ?, decision_reason = ?, updated_at = ? WHERE candidate_id = ?",
                ["promoted" if decision.promote else "rejected", decision.reason, now, candidate_id])
    log.info("promotion decided", candidate_id=candidate_id, slot=slot, promote=decision.promote,
             reason=decision.reason)
    if not decision.promote:
        return True
    if decision.replaces_id:
        con.execute("UPDATE promotions SET active = false, replaced_by = ?, replaced_at = ? "
                    "WHERE candidate_id = ?", [candidate_id, now, decision.replaces_id])
    con.execute(
        "INSERT INTO promotions (candidate_id, campaign_id, slot, model, hardware, backend, speedup, "
        "speedup_lo, speedup_vs_reference, incumbent_id, replaces_id, active, promoted_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, true, ?)",
        [candidate_id, campaign_id, slot, model, hardware, backend, facts.speedup, facts.speedup_lo,
         facts.speedup_vs_reference, facts.incumbent_id, decision.replaces_id, now],
    )
    promoted = ev.KernelPromoted(
        candidate_id=candidate_id, slot=slot, model=model, hardware=hardware, speedup=facts.speedup,
        speedup_lo=facts.speedup_lo, speedup_vs_reference=facts.speedup_vs_reference,
        replaces_id=decision.replaces_id, backend=_backend_enum(backend), source=source, campaign_id=campaign_id,
        promoted_unix=_utc_unix(now),
    )
    outbox.enqueue(con, subjects.KERNEL_PROMOTED, candidate_id, promoted, now)
    return True


def demote(con: duckdb.DuckDBPyConnection, candidate_id: str, reason: str, now: datetime) -> bool:
    """Retire the candidate's promotion if it is active; returns whether it was demoted."""
    row = _one(con, "SELECT active, slot, model, hardware FROM promotions WHERE candidate_id = ?", [candidate_id])
    if row is None or not should_demote("failed", bool(row[0])):
        return False
    _, slot, model, hardware = row
    con.execute("UPDATE promotions SET active = false, demoted_at = ?, demote_reason = ? WHERE candidate_id = ?",
                [now, reason, candidate_id])
    demoted = ev.KernelDemoted(candidate_id=candidate_id, slot=slot, model=model, hardware=hardware,
                               reason=reason, demoted_unix=_utc_unix(now))
    outbox.enqueue(con, subjects.KERNEL_DEMOTED, candidate_id, demoted, now)
    log.warning("kernel demoted", candidate_id=candidate_id, slot=slot, reason=reason)
    return True


def _utc_unix(naive_utc: datetime) -> float:
    return naive_utc.replace(tzinfo=UTC).timestamp()


def _backend_enum(backend: str | None) -> ev.Backend:
    try:
        return ev.Backend.Value(f"BACKEND_{(backend or '').upper()}")
    except ValueError:
        return ev.BACKEND_UNSPECIFIED
