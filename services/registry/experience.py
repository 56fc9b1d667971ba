"""registry.experience: what earlier campaigns measured, for a new campaign's warm start.

Winners only: a candidate benchmarked faster than its incumbent and never failed by the verifier
(a failure is final; a candidate still being verified counts). Per slot, the most similar first:
the same hardware, then the same model, then promoted ones, then the larger speedup; each
configuration once (its best measurement), since the same choices re-measured are one experience.
"""

from __future__ import annotations

import json

import duckdb

from proto.gen.polymorph.v1 import events_pb2 as ev

PER_SLOT = 8
MAX_PER_SLOT = 64

QUERY = """
WITH won AS (
    SELECT b.slot, b.candidate_id, c.params, b.speedup, coalesce(b.model, '') AS model,
           coalesce(b.hardware, '') AS hardware, coalesce(b.campaign_id, '') AS campaign_id,
           p.candidate_id IS NOT NULL AS promoted, coalesce(v.status, '') = 'passed' AS verified
    FROM benchmarks b
    JOIN candidates c ON c.candidate_id = b.candidate_id
    LEFT JOIN verdicts v ON v.candidate_id = b.candidate_id
    LEFT JOIN promotions p ON p.candidate_id = b.candidate_id
    WHERE b.status = 'ok' AND b.speedup > 1.0 AND coalesce(v.status, '') <> 'failed'
      AND list_contains($slots, b.slot) AND coalesce(b.campaign_id, '') <> $exclude
), ranked AS (  -- the order of similarity: same hardware, same model, promoted, the larger speedup
    SELECT *, row_number() OVER (ORDER BY hardware = $hardware DESC, model = $model DESC, promoted DESC,
                                 speedup DESC) AS rank
    FROM won
), best_of_each AS (  -- a configuration measured again is one experience: its most similar measurement
    SELECT * FROM ranked QUALIFY row_number() OVER (PARTITION BY slot, params::VARCHAR ORDER BY rank) = 1
)
SELECT slot, candidate_id, params, speedup, model, hardware, campaign_id, promoted, verified
FROM best_of_each
QUALIFY row_number() OVER (PARTITION BY slot ORDER BY rank) <= $per_slot
ORDER BY slot, rank
"""


def experience(cur: duckdb.DuckDBPyConnection, request: ev.ExperienceRequest) -> ev.ExperienceReply:
    """Answer one request on a reader cursor. Never raises for a bad request."""
    slots = list(dict.fromkeys(request.slots))
    if not slots:
        return ev.ExperienceReply(error="an experience request must name its slots")
    per_slot = min(request.per_slot or PER_SLOT, MAX_PER_SLOT)
    if per_slot < 1:
        return ev.ExperienceReply(error=f"per_slot {request.per_slot} must be positive")
    try:
        rows = cur.execute(QUERY, {"slots": slots, "exclude": request.exclude_campaign, "hardware": request.hardware,
                                   "model": request.model, "per_slot": per_slot}).fetchall()
    except duckdb.Error as exc:
        return ev.ExperienceReply(error=f"{type(exc).__name__}: {exc}"[:500])
    items = []
    for slot, cid, params, speedup, model, hardware, campaign, promoted, verified in rows:
        choices = json.loads(params) if isinstance(params, str) else (params or {})
        items.append(ev.Experience(slot=slot, candidate_id=cid, params={str(k): str(v) for k, v in choices.items()},
                                   speedup=float(speedup), model=model, hardware=hardware, campaign_id=campaign,
                                   promoted=bool(promoted), verified=bool(verified)))
    return ev.ExperienceReply(items=items)
