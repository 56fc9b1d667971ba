"""Which kernel each slot should hold, from kernel.promoted / kernel.demoted in stream order.

Promotions and demotions arrive on two durable consumers, so their relative order is recovered from
the LOOP stream sequence: a slot's incumbent is its most recent promotion that no later demotion
withdrew. Replaying every event after a restart converges to the same answer.
"""

from __future__ import annotations

from collections import defaultdict

from proto.gen.polymorph.v1 import events_pb2 as ev


class Incumbents:
    def __init__(self) -> None:
        self._promoted: dict[str, dict[str, tuple[int, ev.KernelPromoted]]] = defaultdict(dict)
        self._demoted: dict[str, dict[str, int]] = defaultdict(dict)

    def promoted(self, msg: ev.KernelPromoted, seq: int) -> None:
        self._promoted[msg.slot][msg.candidate_id] = (seq, msg)

    def demoted(self, msg: ev.KernelDemoted, seq: int) -> None:
        self._demoted[msg.slot][msg.candidate_id] = max(seq, self._demoted[msg.slot].get(msg.candidate_id, 0))

    def desired(self, slot: str) -> ev.KernelPromoted | None:
        """The slot's current promotion, or None for the reference op."""
        live = [
            (seq, msg) for cid, (seq, msg) in self._promoted[slot].items()
            if self._demoted[slot].get(cid, -1) < seq
        ]
        return max(live, key=lambda pair: pair[0])[1] if live else None


def as_candidate(msg: ev.KernelPromoted) -> ev.Candidate:
    return ev.Candidate(candidate_id=msg.candidate_id, slot=msg.slot, backend=msg.backend, source=msg.source,
                        campaign_id=msg.campaign_id, model=msg.model)
