"""One writer per message type. Each runs inside one transaction (Database.write) and is idempotent:
primary keys plus ON CONFLICT make a redelivered or re-published message a no-op, and the only
updates are states that legitimately advance (a campaign finishing, a passed verdict failing later).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.common import subjects
from services.common.bus import Poison
from services.common.log import get_logger
from services.common.slot_specs import candidate_id
from services.registry import promote, records
from services.registry.records import Row

log = get_logger("registry.store")


@dataclass(frozen=True)
class Meta:
    """Where a message came from and when the registry stored it (naive UTC)."""

    subject: str
    stream_seq: int
    received_at: datetime
    final_attempt: bool = False  # JetStream will not deliver it again after this
    candidate_overdue: bool = False  # delivered often enough that a still-unknown candidate is never coming


def insert(con: duckdb.DuckDBPyConnection, table: str, row: Row) -> None:
    columns = ", ".join(row)
    marks = ", ".join("?" for _ in row)
    con.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks}) ON CONFLICT DO NOTHING", list(row.values()))


def record_event(con: duckdb.DuckDBPyConnection, msg, meta: Meta) -> None:
    insert(con, "events", {
        "subject": meta.subject, "key": records.event_key(msg), "stream": subjects.stream_for(meta.subject),
        "stream_seq": meta.stream_seq, "received_at": meta.received_at, "payload": records.message_json(msg),
    })


def _names(con: duckdb.DuckDBPyConnection, meta: Meta, *, model: str = "", hardware: str = "",
           engine_id: str = "") -> None:
    if model:
        insert(con, "models", {"name": model, "first_seen_at": meta.received_at})
    if hardware:
        insert(con, "hardware", {"name": hardware, "first_engine_id": engine_id, "first_seen_at": meta.received_at})


def _profile(con: duckdb.DuckDBPyConnection, profile: ev.TrafficProfile, fallback_id: str, source: str,
             meta: Meta) -> str:
    """Store a traffic profile; returns its id ('' for an empty profile, which is not stored)."""
    if profile.ByteSize() == 0:
        return ""
    profile_id = profile.profile_id or fallback_id
    insert(con, "traffic_profiles",
           {**records.profile_row(profile, profile_id, source), "received_at": meta.received_at})
    _names(con, meta, model=profile.model)
    return profile_id


# -- one function per message type --------------------------------------------------------------
def store_drift(con: duckdb.DuckDBPyConnection, d: ev.DriftEvent, meta: Meta) -> None:
    ref = _profile(con, d.reference, f"{d.drift_id}:reference", f"drift:{d.drift_id}:reference", meta)
    cur = _profile(con, d.current, f"{d.drift_id}:current", f"drift:{d.drift_id}:current", meta)
    insert(con, "drift_events", {**records.drift_row(d, ref, cur), "received_at": meta.received_at})
    record_event(con, d, meta)


def store_campaign(con: duckdb.DuckDBPyConnection, c: ev.Campaign, meta: Meta) -> None:
    state = records.campaign_state(c, meta.subject)
    profile_id = _profile(con, c.profile, f"{c.campaign_id}:profile", f"campaign:{c.campaign_id}", meta)
    row = records.campaign_row(c, state, profile_id)
    old = con.execute("SELECT state FROM campaigns WHERE campaign_id = ?", [c.campaign_id]).fetchone()
    if old is None:
        insert(con, "campaigns", {**row, "received_at": meta.received_at, "updated_at": meta.received_at})
    elif records.CAMPAIGN_STATE_RANK[state] > records.CAMPAIGN_STATE_RANK.get(old[0], 0):
        # started → completed: take the finishing message's view, keep what it leaves empty
        con.execute(
            "UPDATE campaigns SET state = ?, finished_unix = ?, proposed = ?, stop_reason = ?, "
            "budget = CASE WHEN ? > 0 THEN ? ELSE budget END, "
            "started_unix = CASE WHEN ? > 0 THEN ? ELSE started_unix END, updated_at = ? "
            "WHERE campaign_id = ?",
            [state, c.finished_unix, c.proposed, c.stop_reason, c.budget, c.budget,
             c.started_unix, c.started_unix, meta.received_at, c.campaign_id],
        )
    for share in c.step_shares:  # the same on every message of the campaign: the first one stays
        insert(con, "step_profiles", {"campaign_id": c.campaign_id, "slot": share.slot, "share": share.share,
                                      "us_per_step": share.us_per_step, "step_us": c.step_us,
                                      "floor_us": share.floor_us, "headroom": share.headroom,
                                      "received_at": meta.received_at})
    _names(con, meta, model=c.model)
    record_event(con, c, meta)


def _require_candidate(con: duckdb.DuckDBPyConnection, msg: ev.BenchmarkResult | ev.Verdict, meta: Meta) -> None:
    """A benchmark or verdict is data only about a candidate we hold, and must agree with it. One that
    arrived before its candidate waits (redelivered with backoff); after the last delivery it is refused."""
    kind = type(msg).__name__
    row = con.execute("SELECT slot, campaign_id FROM candidates WHERE candidate_id = ?", [msg.candidate_id]).fetchone()
    if row is None:
        if meta.final_attempt or meta.candidate_overdue:
            raise Poison(f"{kind} for unknown candidate {msg.candidate_id}: refused, not stored")
        raise promote.NotReady(f"{kind} for {msg.candidate_id} arrived before its candidate")
    slot, campaign = row
    if msg.slot and msg.slot != slot:
        raise Poison(f"{kind} for {msg.candidate_id} names slot {msg.slot!r}; the candidate is for {slot!r}")
    if msg.campaign_id and campaign and msg.campaign_id != campaign:
        raise Poison(f"{kind} for {msg.candidate_id} names campaign {msg.campaign_id}; the candidate's is {campaign}")


def store_candidate(con: duckdb.DuckDBPyConnection, c: ev.Candidate, meta: Meta) -> None:
    if c.candidate_id != candidate_id(c.slot, c.source):
        raise Poison(f"Candidate {c.candidate_id} is not the content hash of its slot and source: refused")
    insert(con, "candidates", {**records.candidate_row(c), "received_at": meta.received_at})
    _names(con, meta, model=c.model)
    record_event(con, c, meta)
    promote.evaluate(con, c.candidate_id, meta.received_at)  # a verdict may have been waiting for it


def store_benchmark(con: duckdb.DuckDBPyConnection, b: ev.BenchmarkResult, meta: Meta) -> None:
    _require_candidate(con, b, meta)
    insert(con, "benchmarks", {**records.benchmark_row(b), "received_at": meta.received_at})
    _names(con, meta, model=b.model, hardware=b.hardware, engine_id=b.engine_id)
    record_event(con, b, meta)
    promote.evaluate(con, b.candidate_id, meta.received_at)


def store_verdict(con: duckdb.DuckDBPyConnection, v: ev.Verdict, meta: Meta) -> None:
    _require_candidate(con, v, meta)
    row = records.verdict_row(v)
    old = con.execute("SELECT status, decision FROM verdicts WHERE candidate_id = ?", [v.candidate_id]).fetchone()
    if old is None:
        insert(con, "verdicts", {**row, "received_at": meta.received_at, "updated_at": meta.received_at})
    elif old[0] == "passed" and row["status"] == "failed":
        # a failure found later (a re-check) is final: it replaces the pass, never the other way round
        con.execute(
            "UPDATE verdicts SET status = 'failed', failed_stage = ?, reason = ?, checks = ?, "
            "verify_s = ?, finished_unix = ?, updated_at = ? WHERE candidate_id = ?",
            [row["failed_stage"], row["reason"], row["checks"], row["verify_s"], row["finished_unix"],
             meta.received_at, v.candidate_id],
        )
    _names(con, meta, model=v.model, hardware=v.hardware)
    record_event(con, v, meta)

    stored = con.execute("SELECT status, decision FROM verdicts WHERE candidate_id = ?", [v.candidate_id]).fetchone()
    assert stored is not None, "the verdict row was written above"
    status, decision = stored
    if status == "failed":
        reason = f"verdict failed at {v.failed_stage or 'unknown stage'}: {v.reason}"
        if promote.demote(con, v.candidate_id, reason, meta.received_at):
            decision, why = "demoted", reason
        elif decision is None:
            decision, why = "rejected", reason
        else:
            return
        con.execute("UPDATE verdicts SET decision = ?, decision_reason = ? WHERE candidate_id = ?",
                    [decision, why, v.candidate_id])
        return
    if promote.evaluate(con, v.candidate_id, meta.received_at):
        return
    if not meta.final_attempt:
        raise promote.NotReady(f"verdict for {v.candidate_id} arrived before its benchmark")
    # keep the verdict: the benchmark handler decides it if it ever arrives
    log.error("verdict stored undecided: its benchmark never arrived",
              candidate_id=v.candidate_id)


def store_board_note(con: duckdb.DuckDBPyConnection, n: ev.BoardNote, meta: Meta) -> None:
    insert(con, "board_notes", {**records.board_note_row(n), "received_at": meta.received_at})
    record_event(con, n, meta)


def store_kernel_event(con: duckdb.DuckDBPyConnection, msg: ev.KernelPromoted | ev.KernelDemoted,
                       meta: Meta) -> None:
    """kernel.promoted / kernel.demoted are the registry's own announcements: the log keeps them."""
    _names(con, meta, model=msg.model, hardware=msg.hardware)
    record_event(con, msg, meta)
