"""Promotion policy: pure decisions over facts the registry has stored. No I/O here.

A candidate with a PASSED verdict is promoted for (slot, model, hardware) when
  1. its benchmark has status 'ok';
  2. speedup_lo > 1: faster than the incumbent it was measured against, with the lower end of the
     sign-test interval above 1, i.e. beyond the measured noise;
  3. it beats the promotion active for the same (slot, model, hardware), if any:
     - measured directly against that active kernel (incumbent_id == its id): condition 2 already
       says so, and a direct A/B comparison is stronger evidence than two separate measurements;
     - otherwise its speedup_vs_reference must be strictly greater than the active one's.
The decision is recorded with the verdict, so re-handling the same verdict decides nothing new.
A FAILED verdict demotes the candidate's promotion when that promotion is active.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class BenchFacts:
    status: str                    # 'ok', 'raised', ...
    speedup: float
    speedup_lo: float
    speedup_vs_reference: float
    incumbent_id: str


@dataclass(frozen=True)
class ActivePromotion:
    candidate_id: str
    speedup_vs_reference: float


@dataclass(frozen=True)
class Decision:
    promote: bool
    reason: str
    replaces_id: str = ""          # the active promotion this one retires ('' when none)


def _finite(x: float) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def decide_promotion(
    candidate_id: str, verdict_status: str, bench: BenchFacts, active: ActivePromotion | None
) -> Decision:
    """Should this verified candidate become the active kernel for its (slot, model, hardware)?"""
    if verdict_status != "passed":
        return Decision(False, f"verdict is {verdict_status}")
    if active is not None and active.candidate_id == candidate_id:
        return Decision(False, "already the active kernel")
    if bench.status != "ok":
        return Decision(False, f"benchmark status is {bench.status}")
    if not _finite(bench.speedup_lo) or bench.speedup_lo <= 1.0:
        return Decision(False, f"speedup_lo {bench.speedup_lo:.4g} <= 1: not faster beyond the noise")
    if active is None:
        return Decision(True, f"first kernel for its slot: speedup_lo {bench.speedup_lo:.4g} > 1")
    if bench.incumbent_id == active.candidate_id:
        return Decision(
            True,
            f"beats active {active.candidate_id} head to head: speedup_lo {bench.speedup_lo:.4g} > 1",
            replaces_id=active.candidate_id,
        )
    if not _finite(bench.speedup_vs_reference) or (
        bench.speedup_vs_reference <= active.speedup_vs_reference
    ):
        return Decision(
            False,
            f"speedup_vs_reference {bench.speedup_vs_reference:.4g} does not beat active "
            f"{active.candidate_id} ({active.speedup_vs_reference:.4g})",
        )
    return Decision(
        True,
        f"speedup_vs_reference {bench.speedup_vs_reference:.4g} beats active {active.candidate_id} "
        f"({active.speedup_vs_reference:.4g})",
        replaces_id=active.candidate_id,
    )


def should_demote(verdict_status: str, promotion_active: bool) -> bool:
    """A failed verdict retires an active promotion; anything else leaves promotions alone."""
    return verdict_status == "failed" and promotion_active
