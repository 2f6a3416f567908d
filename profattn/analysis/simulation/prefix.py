"""Automatic prefix caching as vLLM V1 does it (``vllm/v1/core/kv_cache_manager.py``, ``block_pool.py``), over the
block ids a request trace carries: which prompt blocks a request finds cached, which pages it pins, and which cached
blocks the pool evicts when it runs short.

Torch-free. A block is ``block_tokens`` prompt tokens (the trace's block: 512 for Mooncake), keyed by its id
*chained* to its parent's (:func:`chain_keys`: vLLM hashes each full block with its parent's hash, so a block hits
only after the same prefix). A cached block holds ``block_tokens / page`` pages, counted once however many running
requests reference it (a reference count). vLLM's rules kept here:

- a request's hit is the longest run of its leading full blocks that are cached (``find_longest_cache_hit``), at
  most ``prompt − 1`` tokens (the last prompt token is always computed, for its logits); the hit's tokens are not
  prefilled (``num_computed_tokens`` starts there);
- a hit block nobody references is *pinned* (taken out of the free queue: ``touch``), so admitting a request needs
  free pages for its new tokens plus its pinned blocks;
- a full prompt block becomes cached once computed (``cache_full_blocks``; here when the chunk that completes it ends);
  a block already cached by another request stays private to this one (vLLM keeps such a duplicate uncached too);
- a finished or preempted request drops its references; a block at zero references stays cached but free
  (evictable), its tail blocks first in the eviction order (``free_blocks`` frees in reverse);
- a page allocation that needs more pages than are free and uncached evicts cached free blocks, least recently freed
  first.

One simplification: vLLM keeps one free queue, so a freed uncached page and a freed cached block are reused in the
order they were freed; here pages that hold no cached block are used first, cached blocks only evicted when none is
left (a cache kept at least as long as vLLM's). Output tokens are not cached (the trace gives no ids for them).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["PrefixCache", "PrefixStats", "chain_keys"]


#: The last :func:`chain_keys` answer and the objects it was computed from (a rate search replays one trace at many
#: scales: the scaled traces share their block ids and prompt lengths, so the keys are computed once per trace).
_last_keys: list = [None, None, 0, None]


def chain_keys(block_ids: Sequence[np.ndarray], prompt_tokens: np.ndarray, block_tokens: int) -> list[list[int]]:
    """Per request the keys of its *full* prompt blocks (⌊prompt / block_tokens⌋ of them), each key standing for the
    block's id chained to every id before it: equal keys ⇔ equal prefixes up to and including that block. Keys are
    small integers interned in one table (exact: no hash collision). A call with the same ``block_ids`` and
    ``prompt_tokens`` objects as the last one returns that call's lists (the callers only read them)."""
    last = _last_keys
    if last[0] is block_ids and last[1] is prompt_tokens and last[2] == block_tokens:
        return last[3]
    out = _chain_keys(block_ids, prompt_tokens, block_tokens)
    last[:] = [block_ids, prompt_tokens, block_tokens, out]
    return out


def _chain_keys(block_ids: Sequence[np.ndarray], prompt_tokens: np.ndarray, block_tokens: int) -> list[list[int]]:
    table: dict[tuple[int, int], int] = {}
    out = []
    for ids, prompt in zip(block_ids, prompt_tokens.tolist()):
        full = prompt // block_tokens
        parent = -1
        keys = []
        for b in ids[:full].tolist():
            k = table.setdefault((parent, b), len(table))
            keys.append(k)
            parent = k
        out.append(keys)
    return out


@dataclass(frozen=True)
class PrefixStats:
    """What the cache did over a run: ``queried_blocks`` / ``hit_blocks`` (full prompt blocks looked up at admission,
    and found cached), ``queried_tokens`` (prompt tokens at admission, resumed requests' included) and
    ``hit_tokens`` (the prefill tokens the hits saved), ``first_hit_tokens`` / ``first_queried_tokens`` (first
    admissions only), ``evicted_blocks``, ``block_tokens``."""

    queried_blocks: int
    hit_blocks: int
    queried_tokens: int
    hit_tokens: int
    first_queried_tokens: int
    first_hit_tokens: int
    evicted_blocks: int
    block_tokens: int

    @property
    def hit_rate(self) -> float:
        """Hit blocks over queried full prompt blocks (0 when none was queried)."""
        return self.hit_blocks / self.queried_blocks if self.queried_blocks else 0.0

    @property
    def saved_share(self) -> float:
        """Prefill tokens saved over prompt tokens at admission."""
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0


class PrefixCache:
    """The cached blocks of one pool (module docstring): ``ref`` (key → references by running requests),
    ``evictable`` (keys at zero references, in eviction order). Page counts are the scheduler's; this class says
    how many pages a lookup pins or a release frees, and which keys an eviction drops.

    Raises (constructor):
        ValueError: a page size that does not divide the block (a cached block must be whole pages).
    """

    def __init__(self, block_tokens: int, page: int) -> None:
        if block_tokens % page:
            raise ValueError(f"page size {page} does not divide the trace's block of {block_tokens} tokens")
        self.block_tokens = block_tokens
        self.pages_per_block = block_tokens // page
        self.ref: dict[int, int] = {}
        #: Σ over cached blocks of (references − 1) where referenced: the blocks running requests read again from a
        #: page another running request also reads (× block_tokens: the duplicate K/V tokens of a decode step)
        self.extra_refs = 0
        self.evictable: OrderedDict[int, None] = OrderedDict()
        self.version = 0
        self.queried_blocks = self.hit_blocks = self.queried_tokens = self.hit_tokens = 0
        self.first_queried_tokens = self.first_hit_tokens = self.evicted_blocks = 0

    @property
    def evictable_pages(self) -> int:
        """Pages of cached blocks no running request references (free, but holding a cached block)."""
        return len(self.evictable) * self.pages_per_block

    @property
    def shared_tokens(self) -> int:
        """K/V tokens running requests hold in a cached block another running request also holds, counted once per
        extra reference (``extra_refs × block_tokens``): what a decode step over them reads twice or more from one
        page."""
        return self.extra_refs * self.block_tokens

    def hit(self, keys: Sequence[int], prompt: int) -> tuple[int, int]:
        """``(blocks, pages pinned)`` of a lookup: the leading cached blocks of ``keys`` (at most ``prompt − 1``
        tokens) and how many pages admitting them takes from the free pool (the blocks nobody references)."""
        top = min(len(keys), (prompt - 1) // self.block_tokens)
        h = pinned = 0
        ref = self.ref
        while h < top and keys[h] in ref:
            if ref[keys[h]] == 0:
                pinned += self.pages_per_block
            h += 1
        return h, pinned

    def acquire(self, keys: Sequence[int], blocks: int, prompt: int, asked: int, first: bool) -> None:
        """Reference the first ``blocks`` of ``keys`` (found by :meth:`hit`) for a request admitted now, and count
        the lookup (``prompt``: its prompt tokens; ``asked``: the tokens it asked for, its outputs too when resumed;
        ``first``: its first admission)."""
        for k in keys[:blocks]:
            if self.ref[k] == 0:
                del self.evictable[k]
            else:
                self.extra_refs += 1
            self.ref[k] += 1
        self.queried_blocks += min(len(keys), (prompt - 1) // self.block_tokens)
        self.hit_blocks += blocks
        self.queried_tokens += asked
        self.hit_tokens += blocks * self.block_tokens
        if first:
            self.first_queried_tokens += asked
            self.first_hit_tokens += blocks * self.block_tokens
        self.version += 1

    def insert(self, key: int) -> bool:
        """Cache a block a request has just computed, referenced by it; False when it is already cached (the
        request keeps its copy private)."""
        if key in self.ref:
            return False
        self.ref[key] = 1
        self.version += 1
        return True

    def release(self, keys: Sequence[int]) -> int:
        """Drop one reference to each of ``keys`` (a request's cached blocks, in prompt order); returns the pages
        that became free (blocks at zero references, queued for eviction tail first)."""
        freed = 0
        for k in reversed(keys):
            n = self.ref[k] - 1
            self.ref[k] = n
            if n:
                self.extra_refs -= 1
            else:
                self.evictable[k] = None
                freed += self.pages_per_block
        self.version += 1
        return freed

    def evict_to(self, free_pages: int) -> None:
        """Evict cached free blocks, least recently freed first, until they fit in ``free_pages`` (the pool's free
        pages: those not holding a cached block were used first)."""
        ev = self.evictable
        if not ev or len(ev) * self.pages_per_block <= free_pages:  # the common case, once per step: nothing to do
            return
        while ev and len(ev) * self.pages_per_block > free_pages:
            k, _ = ev.popitem(last=False)
            del self.ref[k]
            self.evicted_blocks += 1
            self.version += 1

    def stats(self) -> PrefixStats:
        return PrefixStats(self.queried_blocks, self.hit_blocks, self.queried_tokens, self.hit_tokens,
                           self.first_queried_tokens, self.first_hit_tokens, self.evicted_blocks, self.block_tokens)
