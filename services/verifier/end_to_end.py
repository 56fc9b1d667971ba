"""Stage 4: end to end on the slow tier. The whole model runs N greedy steps with the candidate swapped
in; its tokens must equal the all-reference run's and its logits must stay within tolerance.

Catches what single-call checks cannot: state that builds up over many calls, shapes only the live
model produces, interactions with the KV cache and the other slots.
"""

from __future__ import annotations

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
    return ev.CheckResult(
        stage=STAGE, passed=True, max_abs_err=worst_abs, rel_err=worst_rel,
        detail=f"{len(prompts)} prompts x {steps} greedy steps: tokens agree, "
               f"logits rel_err {worst_rel:.3g} (tolerance {rtol:g})",
    )


def _compare_generation(label: str, got: es.GenerateReply, ref: es.GenerateReply,
                        rtol: float) -> tuple[float, float] | str:
    """(max_abs_err, worst per-step rel_err) when they agree, else the reason they do not."""
    tokens, expected = list(got.tokens), list(ref.tokens)
    if tokens != expected:
        step = next((i for i, (a, b) in enumerate(zip(tokens, expected, strict=False)) if a != b),
                    min(len(tokens), len(expected)))
        return (f"{label}: greedy tokens diverge at step {step} "
                f"(got {tokens[step:step + 4]}, reference {expected[step:step + 4]})")
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
    max_abs = float((out - want).abs().max()) if out.numel() else 0.0
    rows = out.reshape(out.shape[0], -1) if out.dim() else out.reshape(1, 1)
    wants = want.reshape(rows.shape)
    rel = (torch.linalg.vector_norm(rows - wants, dim=-1) / torch.linalg.vector_norm(wants, dim=-1).clamp_min(1e-30))
    worst = float(rel.max()) if rel.numel() else 0.0
    if worst > rtol:
        step = int(rel.argmax())
        return f"{label}: logits rel_err {worst:.3g} at step {step} > tolerance {rtol:g} (max_abs_err {max_abs:.3g})"
    return max_abs, worst
