"""Prefix-cache simulation from prompt block hashes.

A request's hit tokens are the leading blocks already cached (a prefix cache reuses a prompt only up
to its first unseen block), times the block size, capped at the prompt length. Every block of the
request is then inserted (or refreshed) in LRU order; `capacity_blocks` = 0 means an unbounded cache.
"""

from __future__ import annotations

from collections import OrderedDict


class PrefixCache:
    def __init__(self, capacity_blocks: int, block_tokens: int) -> None:
        self.capacity = capacity_blocks
        self.block_tokens = block_tokens
        self._lru: OrderedDict[int, None] = OrderedDict()
        self._all: set[int] = set()

    def __len__(self) -> int:
        return len(self._all) if self.capacity <= 0 else len(self._lru)

    def hit_tokens(self, hashes: list[int], prompt_tokens: int) -> int:
        """Look the request up and insert its blocks; returns the prefix tokens served from cache."""
        if self.capacity <= 0:
            return self._unbounded(hashes, prompt_tokens)
        lru = self._lru
        refresh = lru.move_to_end
        hits = 0
        for h in hashes:
            if h not in lru:
                break
            refresh(h)
            hits += 1
        for h in hashes[hits:]:
            if h in lru:
                refresh(h)
            else:
                lru[h] = None
        while len(lru) > self.capacity:
            lru.popitem(last=False)
        return min(hits * self.block_tokens, prompt_tokens)

    def _unbounded(self, hashes: list[int], prompt_tokens: int) -> int:
        seen = self._all
        hits = 0
        for h in hashes:
            if h not in seen:
                break
            hits += 1
        if hits < len(hashes):
            seen.update(hashes[hits:])
        return min(hits * self.block_tokens, prompt_tokens)

    def state(self) -> list[int]:
        """Blocks in LRU order (oldest first), for snapshots."""
        return list(self._all) if self.capacity <= 0 else list(self._lru)

    def restore(self, blocks: list[int]) -> None:
        if self.capacity <= 0:
            self._all = set(blocks)
        else:
            self._lru = OrderedDict.fromkeys(blocks)
