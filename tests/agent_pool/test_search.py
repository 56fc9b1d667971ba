"""The search agent on its own (no bus), and the Triton gate that decides its search space."""

from __future__ import annotations

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.agent_pool import library
from services.agent_pool.agents.base import OK, SlotContext, Trial
from services.agent_pool.agents.search import SearchAgent, distance
from services.agent_pool.hardware import triton_enabled
from services.common import subjects
from services.common.bus import Bus


def _ctx(slot: str, trials: list[Trial], notes: list[ev.BoardNote] = (), compile_left: int = 0) -> SlotContext:
    return SlotContext(
        campaign_id="c1", slot=slot, model="llama-tiny", shapes=[], space=library.space(slot),
        trials=trials, notes=list(notes), excluded=set(), stamp=lambda s: s, compile_left=compile_left,
    )


def _trial(ctx: SlotContext, params: dict[str, str], status: str = OK, speedup: float = 1.0) -> Trial:
    source = library.render(ctx.slot, params)
    return Trial(ctx.candidate_id(source), ctx.slot, params, "search", source, status=status,
                 speedup=speedup, result_seq=len(ctx.trials) + 1)


async def test_explores_distinct_torch_configs_first_and_never_repeats() -> None:
    agent = SearchAgent(explore=0.25)
    ctx = _ctx("attention", [], compile_left=5)
    seen: set[str] = set()
    for _ in range(12):
        (proposal,) = await agent.propose(ctx, 1)
        cid = library.candidate_id("attention", proposal.source)
        assert cid not in seen
        seen.add(cid)
        ctx.trials.append(Trial(cid, "attention", proposal.params, "search", proposal.source))  # pending
    # without any result, nothing is compiled blindly and the forms are spread out
    assert all(t.params["backend"] == "torch" for t in ctx.trials)
    assert len({t.params["form"] for t in ctx.trials}) == 5


async def test_board_notes_seed_and_failures_steer_away() -> None:
    agent = SearchAgent(explore=0.0)
    ctx = _ctx("rope", [], compile_left=0)
    liked = {"layout": "split", "acc": "native", "backend": "torch"}
    note = ev.BoardNote(note_id="n", campaign_id="older", agent="search", slot="rope", params=liked, score=2.0)
    ctx.notes.append(note)
    (proposal,) = await agent.propose(ctx, 1)
    assert distance(proposal.params, liked) <= 1  # another campaign's winner is tried first
    # every "matmul" layout failed: its other configurations are tried last
    ctx = _ctx("rope", [])
    ctx.trials.append(_trial(ctx, {"layout": "matmul", "acc": "float32", "backend": "torch"}, "raised", 0.0))
    ctx.trials.append(_trial(ctx, {"layout": "stacked", "acc": "float32", "backend": "torch"}, OK, 1.3))
    layouts = [p.params["layout"] for p in await agent.propose(ctx, 7)]
    assert layouts[-1] == "matmul" and "matmul" not in layouts[:-1]


async def test_compile_variants_stay_within_their_allowance() -> None:
    agent = SearchAgent(explore=0.0)
    ctx = _ctx("silu_mul", [], compile_left=2)
    ctx.trials.append(_trial(ctx, {"form": "silu", "acc": "native", "out": "fresh", "backend": "torch"}, OK, 1.5))
    proposals = await agent.propose(ctx, 20)
    assert sum(p.params["backend"] == "compile" for p in proposals) == 2


async def test_when_no_eager_form_wins_the_best_one_is_compiled_next() -> None:
    agent = SearchAgent(explore=0.0)
    ctx = _ctx("rmsnorm", [], compile_left=1)
    base = {"acc": "float32", "scale": "rsqrt", "weight": "after_cast", "out": "fresh", "backend": "torch"}
    for form, speedup in (("pow_mean", 0.9), ("vector_norm", 0.97), ("einsum", 0.5)):
        ctx.trials.append(_trial(ctx, {**base, "form": form}, OK, speedup))
    first, second = await agent.propose(ctx, 2)
    assert first.params == {**base, "form": "vector_norm", "backend": "compile"}
    assert first.parent_id == ctx.trials[1].candidate_id
    assert second.params["backend"] == "torch"  # the allowance is spent


async def test_triton_joins_the_space_only_on_gpu_engines(bus: Bus) -> None:
    assert not await triton_enabled(bus, "auto", "llama-tiny", 0.5)  # no engine answers: CPU assumed
    assert await triton_enabled(bus, "on", "llama-tiny", 0.5)
    hardware = {"value": "cpu (2 cores)"}

    async def discover(req: ev.DiscoverRequest) -> ev.EngineAddress:
        return ev.EngineAddress(address="127.0.0.1:1", model=req.model, hardware=hardware["value"])

    await bus.serve(subjects.ENGINE_DISCOVER, ev.DiscoverRequest, ev.EngineAddress, discover)
    assert not await triton_enabled(bus, "auto", "llama-tiny", 2.0)
    hardware["value"] = "NVIDIA H200"
    assert await triton_enabled(bus, "auto", "llama-tiny", 2.0)
    assert not await triton_enabled(bus, "off", "llama-tiny", 2.0)
    with_triton = library.space("rmsnorm", triton=True)
    triton = [c for c in with_triton if c.backend == "triton"]
    assert triton and all('BACKEND = "triton"' in c.source for c in triton)
    assert not [c for c in library.space("rmsnorm") if c.backend == "triton"]
