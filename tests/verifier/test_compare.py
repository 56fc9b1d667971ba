"""Output comparison and the judging of RunSlot / Generate replies, on real tensors."""

from __future__ import annotations

import pytest
import torch

from proto.gen.polymorph.v1 import engine_service_pb2 as es
from services.verifier.compare import TensorDecodeError, compare, compare_protos, to_proto, to_tensor
from services.verifier.correctness import check_outputs, status_failure
from services.verifier.end_to_end import _compare_generation, prompts_for


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * w


@pytest.fixture
def xw() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return torch.randn(3, 37, 256, generator=g) * 2, torch.randn(256, generator=g) * 0.1 + 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool])
def test_tensor_proto_round_trip(dtype: torch.dtype) -> None:
    t = (torch.randn(3, 5) * 10).to(dtype)
    back = to_tensor(to_proto(t))
    assert back.dtype == dtype and torch.equal(back, t)
    assert to_tensor(to_proto(torch.empty(0, 4))).shape == (0, 4)


def test_undecodable_protos_fail_clearly() -> None:
    with pytest.raises(TensorDecodeError, match="bytes for shape"):
        to_tensor(es.TensorProto(shape=[4], dtype="float32", data=b"\x00" * 3))
    with pytest.raises(TensorDecodeError, match="unknown dtype"):
        to_tensor(es.TensorProto(shape=[1], dtype="complex32", data=b"\x00" * 4))
    ref = to_proto(torch.ones(2))
    assert "no output" in compare_protos(es.TensorProto(), ref).detail


def test_honest_reordering_passes_float32(xw) -> None:
    x, w = xw
    fused = torch.nn.functional.rms_norm(x, (256,), w, 1e-5)
    result = compare(fused, rmsnorm(x, w))
    assert result.passed, result.detail
    assert result.rel_err < 1e-5


def test_float16_compute_fails_float32_tolerance(xw) -> None:
    x, w = xw
    cheap = rmsnorm(x.half(), w.half()).float()
    result = compare(cheap, rmsnorm(x, w))
    assert not result.passed and "tolerance" in result.detail
    assert 1e-4 < result.rel_err < 1e-2


def test_bfloat16_budget_accepts_rounding_but_not_errors(xw) -> None:
    x, w = (t.bfloat16() for t in xw)
    ref = rmsnorm(x, w)
    ours = rmsnorm(x.float(), w.float()).bfloat16()  # one extra rounding step
    assert compare(ours, ref).passed
    assert not compare(ref * 1.1, ref).passed


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_never_passes(xw, bad: float) -> None:
    x, w = xw
    ref = rmsnorm(x, w)
    out = ref.clone()
    out[1, 2, 3] = bad
    result = compare(out, ref)
    assert not result.passed and "NaN/Inf" in result.detail


def test_shape_dtype_and_integer_rules(xw) -> None:
    x, w = xw
    ref = rmsnorm(x, w)
    assert "shape" in compare(ref[:, :-1], ref).detail
    assert "dtype" in compare(ref.double(), ref).detail
    ids = torch.tensor([3, 1, 4])
    assert compare(ids.clone(), ids).passed
    off = compare(torch.tensor([3, 1, 5]), ids)
    assert not off.passed and "1 of 3 values differ" in off.detail


def test_few_grossly_wrong_values_fail_even_when_the_norm_is_small() -> None:
    ref = torch.ones(1_000_000)
    out = ref.clone()
    out[0] = 1.02  # relative norm 2e-5 (within budget), but one value is 2 % off
    result = compare(out, ref)
    assert not result.passed and "1 values beyond atol" in result.detail
    assert result.rel_err < 1e-4


def slot_run(ref: torch.Tensor, first: torch.Tensor, second: torch.Tensor | None = None, *,
             mutated: bool = False, input_id: str = "captured:0") -> es.SlotRun:
    return es.SlotRun(input_id=input_id, reference=to_proto(ref), first=to_proto(first),
                      second=to_proto(first if second is None else second), inputs_mutated=mutated)


def test_check_outputs_judges_every_run(xw) -> None:
    x, w = xw
    ref = rmsnorm(x, w)
    good = [slot_run(ref, ref.clone(), input_id=f"captured:{i}") for i in range(3)]
    passed = check_outputs("captured", good)
    assert passed.passed and "3 inputs" in passed.detail
    wrong = [*good, slot_run(ref, ref * 2, input_id="captured:3")]
    failed = check_outputs("captured", wrong)
    assert not failed.passed and failed.detail.startswith("captured:3:") and failed.rel_err > 0.5
    mutated = check_outputs("captured", [slot_run(ref, ref, mutated=True)])
    assert not mutated.passed and "wrote into its inputs" in mutated.detail
    race = check_outputs("race", [slot_run(ref, ref, torch.zeros_like(ref))], "second")
    assert not race.passed and "second run" in race.detail
    assert not check_outputs("random", []).passed
    errored = check_outputs("captured", [es.SlotRun(input_id="captured:0", error="boom")])
    assert errored.detail == "captured:0: boom"


def test_run_status_reasons() -> None:
    assert status_failure(es.RUN_STATUS_OK, "") is None
    assert "hung" in status_failure(es.RUN_STATUS_TIMEOUT, "no progress for 5 s")
    assert "crashed" in status_failure(es.RUN_STATUS_CRASHED, "SIGSEGV")


def generation(tokens: list[int], logits: torch.Tensor) -> es.GenerateReply:
    return es.GenerateReply(status=es.RUN_STATUS_OK, tokens=tokens, logits=to_proto(logits))


def test_generation_comparison() -> None:
    logits = torch.randn(4, 50)
    ref = generation([1, 2, 3, 4], logits)
    ok = _compare_generation("p", generation([1, 2, 3, 4], logits + 1e-6), ref, 1e-3)
    assert isinstance(ok, tuple) and ok[1] < 1e-3
    diverged = _compare_generation("p", generation([1, 2, 9, 4], logits), ref, 1e-3)
    assert isinstance(diverged, str) and "diverge at step 2" in diverged and "no near-tie" in diverged
    # the reference barely prefers token 3 over 9 at step 2: a flip there is a tie, compared up to it
    tied = logits.clone()
    tied[2, 3], tied[2, 9] = 5.0, 5.0 - 1e-4
    flipped = tied.clone()
    flipped[2, 9] = 5.0 + 1e-4
    parted = _compare_generation("p", generation([1, 2, 9, 7], flipped), generation([1, 2, 3, 4], tied), 1e-3)
    assert isinstance(parted, tuple) and parted[2] == 2
    # a flip at a tie still needs logits within tolerance up to that step
    moved = flipped.clone()
    moved[1] += 0.5
    assert "at step 1" in _compare_generation("p", generation([1, 2, 9, 7], moved), generation([1, 2, 3, 4], tied),
                                              1e-3)
    drift = logits.clone()
    drift[3] += 0.5
    drifted = _compare_generation("p", generation([1, 2, 3, 4], drift), ref, 1e-3)
    assert isinstance(drifted, str) and "at step 3" in drifted
    nan = logits.clone()
    nan[0, 0] = float("nan")
    assert "NaN" in _compare_generation("p", generation([1, 2, 3, 4], nan), ref, 1e-3)


def test_prompts_are_fresh_per_seed_with_odd_lengths() -> None:
    a, b = prompts_for(11, 3), prompts_for(12, 3)
    assert a == prompts_for(11, 3) and a != b
    assert len(a) == 3 and all(len(p) % 2 == 1 for p in a)
    assert len({len(p) for p in a}) == 3
