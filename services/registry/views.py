"""SQL views people query (created by migration 2). Pure: SQL text only.

`polymorph status`, the demo summary and the README's example SQL read these; the columns below
are a contract, so change them only by adding a migration that adds columns.

campaign_progress — one row per (campaign_id, slot) that has candidates:
    campaign_id, slot,
    candidates      candidates proposed (each candidate counted once, under its first campaign)
    benchmarked     of those, with a benchmark result (any status)
    ok              benchmarks with status 'ok'
    wins            ok benchmarks with speedup_lo > 1 (faster than their incumbent beyond the noise)
    verified        candidates with a verdict (passed or failed)
    passed          verdicts with status 'passed'
    promoted        candidates ever promoted (active or not)
    best_speedup                 max speedup over the incumbent among ok benchmarks (NULL: none)
    best_speedup_vs_reference    max speedup over the reference op among ok benchmarks

slot_summary — the same counts per slot over every campaign:
    slot, candidates, benchmarked, ok, wins, verified, passed, promoted, best_speedup,
    best_speedup_vs_reference,
    active_id       candidate id of an active promotion for the slot (any model/hardware; NULL: none)

campaign_overview — one row per campaign (also those only known from their candidates so far):
    campaign_id, state ('running', 'completed', 'failed', NULL when the campaign event is not in yet),
    model, trigger, budget, proposed, stop_reason, started_unix, finished_unix,
    candidates, benchmarked, ok, wins, verified, passed, promoted, best_speedup

leaderboard — every promotion with what was measured, active first then fastest over the reference:
    candidate_id, slot, model, hardware, backend, agent, campaign_id,
    speedup, speedup_lo, speedup_hi, speedup_vs_reference, aa_spread,
    median_us, incumbent_median_us, incumbent_id, replaces_id,
    active, promoted_at, replaced_by, demoted_at, demote_reason, params

Example: SELECT slot, candidate_id, speedup_vs_reference FROM leaderboard WHERE active;
"""

from __future__ import annotations

_COUNTS = """
    count(*) AS candidates,
    count(b.candidate_id) AS benchmarked,
    count(*) FILTER (WHERE b.status = 'ok') AS ok,
    count(*) FILTER (WHERE b.status = 'ok' AND b.speedup_lo > 1) AS wins,
    count(v.candidate_id) AS verified,
    count(*) FILTER (WHERE v.status = 'passed') AS passed,
    count(p.candidate_id) AS promoted,
    max(b.speedup) FILTER (WHERE b.status = 'ok') AS best_speedup,
    max(b.speedup_vs_reference) FILTER (WHERE b.status = 'ok') AS best_speedup_vs_reference"""

_JOINS = """
    FROM candidates c
    LEFT JOIN benchmarks b ON b.candidate_id = c.candidate_id
    LEFT JOIN verdicts v ON v.candidate_id = c.candidate_id
    LEFT JOIN promotions p ON p.candidate_id = c.candidate_id"""

VIEWS: dict[str, str] = {
    "campaign_progress": f"""
        CREATE OR REPLACE VIEW campaign_progress AS
        SELECT c.campaign_id, c.slot, {_COUNTS}
        {_JOINS}
        GROUP BY c.campaign_id, c.slot""",
    "slot_summary": f"""
        CREATE OR REPLACE VIEW slot_summary AS
        SELECT c.slot, {_COUNTS},
            (SELECT min(a.candidate_id) FROM promotions a WHERE a.slot = c.slot AND a.active) AS active_id
        {_JOINS}
        GROUP BY c.slot""",
    "campaign_overview": """
        CREATE OR REPLACE VIEW campaign_overview AS
        WITH progress AS (
            SELECT campaign_id,
                sum(candidates) AS candidates, sum(benchmarked) AS benchmarked, sum(ok) AS ok,
                sum(wins) AS wins, sum(verified) AS verified, sum(passed) AS passed,
                sum(promoted) AS promoted, max(best_speedup) AS best_speedup
            FROM campaign_progress GROUP BY campaign_id
        )
        SELECT coalesce(k.campaign_id, g.campaign_id) AS campaign_id,
            k.state, k.model, k.trigger, k.budget, k.proposed, k.stop_reason,
            k.started_unix, k.finished_unix,
            coalesce(g.candidates, 0)::BIGINT AS candidates,
            coalesce(g.benchmarked, 0)::BIGINT AS benchmarked,
            coalesce(g.ok, 0)::BIGINT AS ok,
            coalesce(g.wins, 0)::BIGINT AS wins,
            coalesce(g.verified, 0)::BIGINT AS verified,
            coalesce(g.passed, 0)::BIGINT AS passed,
            coalesce(g.promoted, 0)::BIGINT AS promoted,
            g.best_speedup
        FROM campaigns k FULL OUTER JOIN progress g ON g.campaign_id = k.campaign_id""",
    "leaderboard": """
        CREATE OR REPLACE VIEW leaderboard AS
        SELECT p.candidate_id, p.slot, p.model, p.hardware, p.backend, c.agent, p.campaign_id,
            p.speedup, p.speedup_lo, b.speedup_hi, p.speedup_vs_reference, b.aa_spread,
            b.median_us, b.incumbent_median_us, p.incumbent_id, p.replaces_id,
            p.active, p.promoted_at, p.replaced_by, p.demoted_at, p.demote_reason, c.params
        FROM promotions p
        LEFT JOIN candidates c ON c.candidate_id = p.candidate_id
        LEFT JOIN benchmarks b ON b.candidate_id = p.candidate_id
        ORDER BY p.active DESC, p.speedup_vs_reference DESC, p.promoted_at""",
}
