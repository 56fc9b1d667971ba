"""What two minutes of a bursty trace can tell: the hard case's detection rate for idealised tests.

The detector must find a prompt growth within 2 minutes of trace time while alarming at most once per
10 hours. This measures how often that is possible at all for the detector's own location statistic
(location.py) on the same resampled traffic as drift_eval's hard case, for tests that know more than
the detector does: the change time (one test, on the 2 minutes from the first shifted request) and
the stationary traffic's exact distribution of 2-minute windows, or a reference of k random minutes
of it. Each test's threshold is read off the null windows with the same number of requests (count
deciles: a busy window wanders less than a quiet one), at a per-window false-alarm rate alpha: 1/300
is one alarm in the 300 disjoint 2-minute windows of 10 hours (a real detector, testing overlapping
windows every 10 s, gets more chances to alarm and needs a lower alpha; 1/3000 shows how much that
costs). "Own tails" uses each count decile's empirical upper tail; "normal" a symmetric one, |d|,
which is what a z-test against a normal law assumes: code's location has a heavy lower tail
(minutes of short prompts) and a light upper one (prompts are capped by the context length).
"""

from __future__ import annotations

import numpy as np

from services.traffic_profiler.location import ESTIMATORS, locations
from services.traffic_profiler.synthetic import bootstrap_blocks


def _blocks(source: list, lo: float, hi: float, block_s: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """(arrival within the block, prompt tokens) of each block that block_bootstrap draws from."""
    t = np.array([r.arrival_s for r in source])
    p = np.array([r.prompt_tokens for r in source], dtype=float)
    return [(t[idx] - start, p[idx]) for start, idx in bootstrap_blocks(source, block_s, lo, hi)]


def _window(blocks: list, picks: np.ndarray, offset: float, block_s: float, length: float) -> np.ndarray:
    """Prompts in [offset, offset + length) of the stream made of blocks[picks] laid end to end."""
    t = np.concatenate([blocks[b][0] + j * block_s for j, b in enumerate(picks)])
    p = np.concatenate([blocks[b][1] for b in picks])
    return p[(t >= offset) & (t < offset + length)]


def _location(prompts: np.ndarray) -> tuple[float, ...]:
    return locations(np.sort(prompts))


def information_bound(source: list, lo: float, hi: float, block_s: float, *, factor: float, length: float,
                      min_records: int, alphas: tuple[float, ...], reference_minutes: tuple[int, ...],
                      null_windows: int, shifted_windows: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    blocks = _blocks(source, lo, hi, block_s)
    span = int(np.ceil(length / block_s)) + 1  # blocks a window can touch
    nonempty = [i for i, b in enumerate(blocks) if b[0].size]

    def null_window() -> np.ndarray:  # a stationary stream seen from a random time
        return _window(blocks, rng.integers(len(blocks), size=span), rng.uniform(0, block_s), block_s, length)

    def shifted_window() -> np.ndarray:
        # drift_eval injects at multiples of block_s: the stream after t0 is fresh random blocks, and
        # the 2 minutes start at the first request (idle blocks before it are not counted)
        first = nonempty[int(rng.integers(len(nonempty)))]
        picks = np.concatenate([[first], rng.integers(len(blocks), size=span - 1)])
        prompts = _window(blocks, picks, float(blocks[first][0][0]), block_s, length)
        return np.maximum(1, np.round(prompts * factor))

    null = [null_window() for _ in range(null_windows)]
    shifted = [shifted_window() for _ in range(shifted_windows)]
    null = [w for w in null if w.size >= min_records]  # below min_records the detector compares nothing
    testable = [w for w in shifted if w.size >= min_records]
    n_null = np.array([w.size for w in null])
    n_shift = np.array([w.size for w in testable])
    edges = np.unique(np.quantile(n_null, np.linspace(0, 1, 11)))
    bucket_null = np.clip(np.searchsorted(edges, n_null, side="right") - 1, 0, edges.size - 2)
    bucket_shift = np.clip(np.searchsorted(edges, n_shift, side="right") - 1, 0, edges.size - 2)
    loc_null = np.array([_location(w) for w in null])
    loc_shift = np.array([_location(w) for w in testable])
    pooled = _location(np.concatenate([b[1] for b in blocks]))  # what an endless reference converges to
    references: dict[str, np.ndarray] = {"distribution known": np.array([pooled])}
    for k in reference_minutes:
        references[f"reference of {k} random minutes"] = np.array(
            [_location(np.concatenate([blocks[b][1] for b in rng.integers(len(blocks), size=k)])) for _ in range(2000)])

    def rate(null_stat: np.ndarray, shift_stat: np.ndarray, alpha: float, symmetric: bool) -> float:
        """Share of all shifted windows (untestable ones are misses) over their count decile's threshold."""
        hits = 0
        for b in range(edges.size - 1):
            ref = null_stat[bucket_null == b]
            threshold = np.quantile(np.abs(ref), 1 - alpha) if symmetric else np.quantile(ref, 1 - alpha / 2)
            hits += int(np.sum(shift_stat[bucket_shift == b] > threshold))
        return hits / len(shifted)

    rows = []
    for i, name in enumerate(ESTIMATORS):
        for label, ref_locs in references.items():
            # d = window - reference, each window against its own random reference
            d_null = loc_null[:, i] - ref_locs[rng.integers(len(ref_locs), size=len(null)), i]
            d_shift = loc_shift[:, i] - ref_locs[rng.integers(len(ref_locs), size=len(testable)), i]
            for tails in ("own tails", "normal"):
                rows.append({"estimator": name, "test": f"change time known, {label}", "tails": tails,
                             "rates": [round(rate(d_null, d_shift, alpha, tails == "normal"), 3) for alpha in alphas]})
    return {"factor": factor, "length_s": length, "null_windows": len(null), "shifted_windows": len(shifted),
            "testable_share": round(len(testable) / len(shifted), 3), "alphas": list(alphas),
            "count_deciles": edges.round().tolist(), "rows": rows}
