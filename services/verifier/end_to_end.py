"""Stage 4: end to end on the slow tier. The whole model runs N greedy steps with the candidate swapped
in; its tokens must equal the all-reference run's and its logits must stay within tolerance.

Catches what single-call checks cannot: state that builds up over many calls, shapes only the live
model produces, interactions with the KV cache and the other slots.
"""

from __future__ import annotations

import math
import random
from functools import partial

import torch

from proto.gen.polymorph.v1 import engine_service_pb2 as es
from proto.gen.polymorph.v1 import events_pb2 as ev
from services.verifier.compare import DEFAULT_DTYPE, E2E_TOLERANCES, TensorDecodeError, is_empty, to_tensor
from services.verifier.correctness import failed, status_failure
from services.verifier.engine_client import EngineClient, EngineUnavailable

STAGE = "end_to_end"
# Prompt token ids stay below this: every tokenizer (and llama-tiny) has a larger vocabulary.
PROMPT_TOKEN_LIMIT = 100


def prompts_for(seed: int, count: int) -> list[list[int]]:
    """`count` prompts of distinct odd lengths (1..63 tokens), fresh for every seed."""
    rng = random.Random(seed)
    odd = range(1, 64, 2)
    lengths = sorted(rng.sample(odd, min(count, len(odd))))
    lengths += [rng.choice(odd) for _ in range(count - len(lengths))]
    return [[rng.randrange(1, PROMPT_TOKEN_LIMIT) for _ in range(n)] for n in lengths]


async def check_end_to_end(engine: EngineClient, candidate: ev.Candidate, *, steps: int,
                           prompts: list[list[int]], dtype: str = "") -> ev.CheckResult:
    rtol = E2E_TOLERANCES.get(dtype or DEFAULT_DTYPE, E2E_TOLERANCES[DEFAULT_DTYPE])
    worst_rel = worst_abs = 0.0
    ties: list[str] = []
    for index, prompt in enumerate(prompts):
        label = f"prompt {index} ({len(prompt)} tokens)"
        request = partial(es.GenerateRequest, prompt=prompt, steps=steps, tier=es.TIER_SLOW, return_logits=True)
        ref = await engine.generate(request(reference_only=True))
        if ref.status != es.RUN_STATUS_OK:  # the reference failing is the engine's problem: retry later
            raise EngineUnavailable(f"reference Generate failed: {status_failure(ref.status, ref.error)}")
        got = await engine.generate(request(overrides=[candidate]))
        reason = status_failure(got.status, got.error)
        if reason:
            return failed(STAGE, f"{label}: {reason}")
        verdict = _compare_generation(label, got, ref, rtol)
        if isinstance(verdict, str):
            return ev.CheckResult(stage=STAGE, passed=False, detail=verdict,
                                  max_abs_err=worst_abs, rel_err=worst_rel)
        worst_abs, worst_rel = max(worst_abs, verdict[0]), max(worst_rel, verdict[1])
        if verdict[2] is not None:
            ties.append(f"{index}@{verdict[2]}")
    if len(ties) > len(prompts) // 2:  # each a near-tie, but a kernel that flips most of them moves the logits
        return ev.CheckResult(stage=STAGE, passed=False, max_abs_err=worst_abs, rel_err=worst_rel,
                              detail=f"greedy tokens part at near-ties on {len(ties)} of {len(prompts)} prompts "
                                     f"(prompt@step: {', '.join(ties)}): more than half")
    parted = f"; parted at near-ties on {len(ties)} (prompt@step: {', '.join(ties)})" if ties else ""
    return ev.CheckResult(
        stage=STAGE, passed=True, max_abs_err=worst_abs, rel_err=worst_rel,
        detail=f"{len(prompts)} prompts x {steps} greedy steps: tokens agree{parted}, "
               f"logits rel_err {worst_rel:.3g} (tolerance {rtol:g})",
    )


TIE_SCALE = 4.0  # a flipped argmax is a near-tie if the reference's margin is within this many rtol x rms


def near_tie(want_row: torch.Tensor, ref_token: int, got_token: int, rtol: float) -> bool:
    """The reference itself barely prefers its token: a margin within the tolerance's scale of the
    row's logits, or two units of bfloat16 spacing at the top logit (logits that are equal once
    rounded are ties whatever the kernel)."""
    top = float(want_row[ref_token])
    margin = top - float(want_row[got_token])
    rms = float(want_row.pow(2).mean().sqrt())
    spacing = 2.0 ** (math.floor(math.log2(max(abs(top), 1e-30))) - 7)
    return 0.0 <= margin <= TIE_SCALE * rtol * rms + 2 * spacing


def _compare_generation(label: str, got: es.GenerateReply, ref: es.GenerateReply,
                        rtol: float) -> tuple[float, float, int | None] | str:
    """(max_abs_err, worst per-step rel_err, the step of a near-tie divergence or None) when they
    agree, else the reason they do not. Tokens must be equal, except that the sequences may part at a
    near-tie of the reference (random-weight models are full of them, and a bf16 kernel that sums in
    another order flips them); the logits are compared up to and including that step (the prefixes
    are equal that far), so a flip needs logits within tolerance."""
    tokens, expected = list(got.tokens), list(ref.tokens)
    split: int | None = None
    if tokens != expected:
        split = next((i for i, (a, b) in enumerate(zip(tokens, expected, strict=False)) if a != b),
                     min(len(tokens), len(expected)))
        if len(tokens) != len(expected) or split >= len(tokens):
            return f"{label}: {len(tokens)} greedy tokens, reference {len(expected)}"
    if is_empty(ref.logits):
        raise EngineUnavailable("reference Generate returned no logits")
    if is_empty(got.logits):
        return f"{label}: no logits returned with the candidate"
    try:
        out, want = to_tensor(got.logits).double(), to_tensor(ref.logits).double()
    except TensorDecodeError as exc:
        return f"{label}: undecodable logits: {exc}"
    if out.shape != want.shape:
        return f"{label}: logits shape {list(out.shape)} != reference {list(want.shape)}"
    if not bool(torch.isfinite(out).all()):
        return f"{label}: NaN/Inf in the logits"
    rows = out.reshape(out.shape[0], -1) if out.dim() else out.reshape(1, 1)
    wants = want.reshape(rows.shape)
    if split is not None:
        if split >= rows.shape[0]:
            return f"{label}: greedy tokens diverge at step {split} beyond the logits returned"
        rows, wants = rows[: split + 1], wants[: split + 1]
    max_abs = float((rows - wants).abs().max()) if rows.numel() else 0.0
    rel = (torch.linalg.vector_norm(rows - wants, dim=-1) / torch.linalg.vector_norm(wants, dim=-1).clamp_min(1e-30))
    worst = float(rel.max()) if rel.numel() else 0.0
    if worst > rtol:
        step = int(rel.argmax())
        return f"{label}: logits rel_err {worst:.3g} at step {step} > tolerance {rtol:g} (max_abs_err {max_abs:.3g})"
    if split is not None and not near_tie(wants[split], expected[split], tokens[split], rtol):
        margin = float(wants[split, expected[split]] - wants[split, tokens[split]])
        return (f"{label}: greedy tokens diverge at step {split} (got {tokens[split:split + 4]}, reference "
                f"{expected[split:split + 4]}; the reference's margin {margin:.3g} is no near-tie)")
    return max_abs, worst, split
