"""The detector on synthetic traffic: quiet when nothing moves, fires on shifts, deterministic."""

from __future__ import annotations

import pickle
from dataclasses import replace

import numpy as np
import pytest

from proto.gen.polymorph.v1 import events_pb2 as ev
from services.traffic_profiler.config import DetectorConfig
from services.traffic_profiler.detector import DriftDetector
from services.traffic_profiler.records import MalformedRecord, Record
from services.traffic_profiler.synthetic import BASE, SHIFTS, Decoration, decorate


def stream(seconds: float, rate: float = 10.0, seed: int = 0, shift_at: float | None = None,
           factor: float = 1.8) -> list[Record]:
    """Poisson arrivals, log-normal prompts and outputs; prompts x factor after shift_at."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, int(seconds * rate * 1.1)))
    t = t[t < seconds]
    prompts = rng.lognormal(7.0, 1.0, t.size)
    if shift_at is not None:
        prompts[t >= shift_at] *= factor
    outputs = rng.lognormal(4.5, 0.8, t.size)
    return [Record(float(a), int(p) + 1, int(o) + 1) for a, p, o in zip(t, prompts, outputs, strict=True)]


def run(records: list[Record], cfg: DetectorConfig | None = None) -> tuple[DriftDetector, list]:
    detector = DriftDetector(cfg or DetectorConfig())
    drifts = [d for r in records for d in detector.observe(r)]
    return detector, drifts + detector.flush()


def test_stationary_traffic_raises_no_alarm() -> None:
    _, drifts = run(stream(3600, seed=1))
    assert drifts == []


def test_prompt_shift_is_reported_with_what_when_and_buckets() -> None:
    _, drifts = run(stream(1800, seed=2, shift_at=1200))
    assert drifts, "a +80% prompt shift must be detected"
    first = drifts[0]
    change = next(c for c in first.changes if c.metric == "prompt_tokens")
    assert 1200 <= first.t_s <= 1200 + 120
    assert 1140 <= change.since_s <= first.t_s
    assert change.after / change.before == pytest.approx(1.8, rel=0.25)
    assert change.ks >= 0.1 and change.psi >= 0.1
    event = first.to_proto("llama-tiny")
    assert event.current.buckets and event.reference.requests > 0
    assert {b.phase for b in event.current.buckets} == {ev.PHASE_PREFILL, ev.PHASE_DECODE}
    assert sum(b.weight for b in event.current.buckets) == pytest.approx(1.0)
    # the prefill buckets follow the new prompt lengths
    ref_ctx = max(b.context_len for b in event.reference.buckets if b.phase == ev.PHASE_PREFILL)
    cur_ctx = max(b.context_len for b in event.current.buckets if b.phase == ev.PHASE_PREFILL)
    assert cur_ctx > ref_ctx


def test_drift_ids_are_deterministic_and_survive_a_snapshot() -> None:
    records = stream(1800, seed=3, shift_at=1000)
    _, drifts = run(records)
    _, again = run(records)
    assert [d.drift_id for d in drifts] == [d.drift_id for d in again] and drifts
    # a detector pickled halfway (the service's snapshot) continues exactly as one that never stopped
    half = DriftDetector()
    first = [d for r in records[: len(records) // 2] for d in half.observe(r)]
    resumed: DriftDetector = pickle.loads(pickle.dumps(half))
    rest = [d for r in records[len(records) // 2:] for d in resumed.observe(r)] + resumed.flush()
    assert [d.drift_id for d in first + rest] == [d.drift_id for d in drifts]


def test_a_replayed_trace_starts_a_new_epoch_with_new_ids() -> None:
    records = stream(1500, seed=4, shift_at=900)
    detector = DriftDetector()
    first = [d for r in records for d in detector.observe(r)]
    second = [d for r in records for d in detector.observe(r)] + detector.flush()
    assert detector.rewinds == 1 and detector.epoch == 1
    assert first and second and not {d.drift_id for d in first} & {d.drift_id for d in second}


def test_campaign_completion_rebases_every_reference() -> None:
    detector = DriftDetector()
    for r in stream(1200, seed=5):
        detector.observe(r)
    detector.request_rebase()
    for r in stream(1300, seed=5)[-50:]:
        detector.observe(replace(r, arrival_s=r.arrival_s))
    detector.flush()  # the records still in the reordering window
    cfg = detector.cfg
    starts = {m: ref.start for m, ref in detector.refs.items()}
    assert all(s >= 1200 - cfg.rate_reference_s - cfg.step_s for s in starts.values())
    assert starts["prompt_tokens"] >= 1200 - cfg.reference_s - cfg.step_s


def test_expert_skew_and_tag_mix_changes_are_detected() -> None:
    base = stream(1500, seed=6)
    skewed = decorate(base, BASE, replace(BASE, expert_skew=1.3), 900, seed=6)
    _, drifts = run(skewed)
    assert any("expert_load" in {c.metric for c in d.changes} and d.t_s <= 900 + 120 for d in drifts)
    before, after = Decoration(eu_share=0.2, eu_factor=1.0), Decoration(eu_share=0.8, eu_factor=1.0)
    mixed = decorate(base, before, after, 900, seed=6)
    _, drifts = run(mixed)
    tag_events = [d for d in drifts if "tag_mix" in {c.metric for c in d.changes}]
    assert tag_events and 900 <= tag_events[0].t_s <= 900 + 120
    assert tag_events[0].current.requests > 0


def test_malformed_records_are_refused() -> None:
    for bad in (ev.RequestRecord(arrival_s=1.0, prompt_tokens=-3), ev.RequestRecord(arrival_s=float("nan")),
                ev.RequestRecord(arrival_s=1.0, prompt_tokens=5, expert_counts=[3, -1])):
        with pytest.raises(MalformedRecord):
            Record.from_proto(bad)


def test_regional_mix_shift_names_the_tag_mix_and_the_event_carries_tag_profiles() -> None:
    shift = next(s for s in SHIFTS if s.name.startswith("regional"))
    _, drifts = run(decorate(stream(1500, seed=7), shift.before, shift.after, 900, seed=7))
    assert drifts and all(d.t_s >= 900 for d in drifts)
    first = drifts[0]
    assert first.t_s <= 900 + 120 and "tag_mix" in {c.metric for c in first.changes}
    event = ev.DriftEvent.FromString(first.to_proto("llama-tiny").SerializeToString())  # survives the wire
    tags = {t.tag: t for t in event.current.tags}
    ref_tags = {t.tag: t for t in event.reference.tags}
    assert set(tags) == set(ref_tags) == {"eu", "us"}
    assert sum(t.requests for t in tags.values()) == event.current.requests
    assert sum(t.arrival_rate for t in tags.values()) == pytest.approx(event.current.arrival_rate)
    assert tags["eu"].requests > tags["us"].requests and ref_tags["eu"].requests < ref_tags["us"].requests
    assert tags["eu"].prompt_tokens.p50 > 1.2 * tags["us"].prompt_tokens.p50  # eu prompts are 1.4x longer
    assert 0 < tags["eu"].prefix_hit_rate < 1 and tags["eu"].output_tokens.p90 > 0


def test_location_test_finds_a_modest_prompt_growth_the_shape_tests_miss() -> None:
    records = stream(1800, seed=8, shift_at=1200, factor=1.3)
    _, drifts = run(records)
    hits = [d for d in drifts if "prompt_tokens" in {c.metric for c in d.changes}]
    assert hits and 1200 <= hits[0].t_s <= 1200 + 120 and not [d for d in drifts if d.t_s < 1200]
    change = next(c for c in hits[0].changes if c.metric == "prompt_tokens")
    assert change.after > change.before
    _, shape_only = run(records, replace(DetectorConfig(), loc_p_max=0.0))
    assert not [d for d in shape_only if 1200 <= d.t_s <= 1200 + 120]


def hashed_stream(seconds: float, rate: float = 5.0, seed: int = 0, prefixes: int = 400,
                  fresh_after: float | None = None) -> list[Record]:
    """Requests sharing Zipf-popular 4-block prefixes plus a unique block: a cold cache warms for minutes.
    From fresh_after on, every other request brings a prefix never seen before (the hit rate drops)."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, int(seconds * rate * 1.1)))
    weights = 1.0 / np.arange(1, prefixes + 1) ** 0.8
    out = []
    for i, a in enumerate(t[t < seconds]):
        k = int(rng.choice(prefixes, p=weights / weights.sum()))
        if fresh_after is not None and a >= fresh_after and i % 2:
            k = 10**6 + i
        blocks = [k * 10 + j for j in range(4)] + [10**9 + i]
        out.append(Record(float(a), 5 * 512, int(rng.integers(20, 200)), block_hashes=blocks))
    return out


def test_a_warming_prefix_cache_is_not_drift_but_a_later_hit_rate_change_is() -> None:
    hits: list[float] = []
    cold = DriftDetector(on_release=lambda r, hit: hits.append(hit))
    for r in hashed_stream(900, seed=9):
        cold.observe(r)
    cold.flush()
    early, late = np.mean(hits[:300]) / 2560, np.mean(hits[-1000:]) / 2560
    assert late - early > 0.2, "the stream must warm the cache (else this test proves nothing)"
    _, drifts = run(hashed_stream(1500, seed=9))
    assert not [d for d in drifts if "prefix_hit_rate" in {c.metric for c in d.changes}]
    _, drifts = run(hashed_stream(1500, seed=9, fresh_after=1100))
    hit_events = [d for d in drifts if "prefix_hit_rate" in {c.metric for c in d.changes}]
    assert hit_events and 1100 <= hit_events[0].t_s <= 1100 + 120
    _, warm_off = run(hashed_stream(1500, seed=9), replace(DetectorConfig(), cache_warmup_s=0.0))
    assert warm_off  # without the warm-up rule the warming cache itself is reported (what the rule prevents)


def wander_ticks(detector: DriftDetector, scale: float) -> int:
    effect = detector.noise[("prompt_tokens", scale)].location[0]
    return len(effect.history) + len(effect.pending)


def test_a_longer_window_the_reference_cuts_is_not_tested_nor_measured() -> None:
    # while the reference grows (its first reference_s) it ends where the middle window begins, so
    # the long window (T - w, T] would be cut back to a shorter one: a repeat of that one's test, with
    # a wander that is not this window's. Only whole windows count.
    cfg = DetectorConfig()
    detector, _ = run(stream(600, seed=3))
    assert wander_ticks(detector, cfg.window_s) > 0 and wander_ticks(detector, cfg.mid_window_s) > 0
    assert detector.refs["prompt_tokens"].end <= 600 - cfg.mid_window_s
    detector, _ = run(stream(cfg.reference_s + cfg.long_window_s - 60, seed=3))
    assert wander_ticks(detector, cfg.long_window_s) == 0
    detector, _ = run(stream(cfg.reference_s + cfg.long_window_s + 300, seed=3))
    assert wander_ticks(detector, cfg.long_window_s) > 0
