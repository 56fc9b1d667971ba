"""Prefix-cache simulation: hits stop at the first unseen block; LRU capacity evicts."""

from __future__ import annotations

from services.traffic_profiler.prefix_cache import PrefixCache


def test_hits_are_the_cached_prefix_only() -> None:
    cache = PrefixCache(capacity_blocks=0, block_tokens=512)
    assert cache.hit_tokens([1, 2, 3], 1500) == 0
    assert cache.hit_tokens([1, 2, 9], 1400) == 1024      # blocks 1, 2 shared, 9 new
    assert cache.hit_tokens([5, 1, 2], 1536) == 0          # same blocks, but not a prefix
    assert cache.hit_tokens([1, 2, 3], 1100) == 1100       # capped at the prompt length
    assert len(cache) == 5


def test_lru_capacity_evicts_the_oldest_blocks() -> None:
    cache = PrefixCache(capacity_blocks=3, block_tokens=10)
    cache.hit_tokens([1, 2], 20)
    cache.hit_tokens([3], 10)
    cache.hit_tokens([1], 10)            # refreshes 1: now 2 is the oldest
    cache.hit_tokens([4], 10)            # evicts 2
    assert cache.hit_tokens([1, 2], 20) == 10
    assert len(cache) == 3
    restored = PrefixCache(capacity_blocks=3, block_tokens=10)
    restored.restore(cache.state())
    assert restored.state() == cache.state()
