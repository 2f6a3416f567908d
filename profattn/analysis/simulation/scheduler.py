"""Continuous batching over a paged KV cache, as vLLM's V1 scheduler does it: which requests run in a step, how many
tokens each, what the KV cache holds, and who is preempted when it is full.

Torch-free. The policy is vLLM V1's ``Scheduler.schedule`` (``vllm/v1/core/sched/scheduler.py``) with its knobs
named as vLLM names them (:class:`SchedulerConfig`):

1. *Running requests first, in the order they were admitted*, each asking for ``num_tokens − num_computed_tokens``
   tokens: one for a decoding request, the rest of its prompt (capped by the token budget left) for one still in
   chunked prefill. A request mid-prefill always consumed the whole budget of the step that admitted it, so it is
   the last of the running list and runs after every decode: *decode tokens first, then prefill chunks*.
2. Each running request's new tokens need KV pages (``allocate_slots``: ⌈(computed + new) / block_size⌉ pages
   held). When the free pool cannot give them, the *last* running request is preempted (FCFS policy:
   ``self.running.pop()``) — its pages freed, ``num_computed_tokens = 0`` — and put at the *front* of the waiting
   queue, until the allocation fits: **preemption by recompute** (vLLM V1 has no swapping). A resumed request
   recomputes its prompt and every token it had generated as one prefill, whose last position samples its next token.
3. Then, only if no request was preempted in this step, *waiting requests in order* while the token budget lasts and
   fewer than ``max_num_seqs`` run: each asks for all its tokens (prompt, plus outputs when resumed), cut to the
   budget left when ``enable_chunked_prefill`` (else it waits for a step with room for all of them), and is admitted
   only if the free pool holds its pages (no preemption for a waiting request).
4. After the step every request that computed all its tokens samples one: a prefill that completes its prompt emits
   its first token (time to first token), a decoding request its next; a request is finished after its
   ``num_decode_tokens`` output tokens and frees its pages.

KV capacity (:func:`kv_capacity`) follows vLLM's memory profiling: ``gpu_memory_utilization`` × the GPU's memory,
less the weights and the activation peak of a ``max_num_batched_tokens`` step, divided by the bytes of one page
(``block_size`` tokens × every layer's K and V at the KV dtype). Prefix caching (``enable_prefix_caching``, on a
trace that carries block ids) is :mod:`~profattn.analysis.simulation.prefix`'s: a waiting request's cached leading
blocks are not prefilled and their pages are shared, counted once; without block ids every prompt is new. Not
modelled: ``long_prefill_token_threshold`` (0, vLLM's default), speculative decoding, async scheduling, the null block.

The engine keeps every quantity a step's cost needs as running sums (decoding sequences, their K/V tokens, the
longest one, pages needed per step by residue of the sequence lengths modulo the page size), so a run of
decode-only steps between two events — an arrival that can be admitted, a request finishing, the pool running
out — advances as one vector (:meth:`Scheduler.decode_run`), exactly as the step-by-step policy would; ``audit``
mode runs every step through the general path and checks the page count against Σ ⌈len / page⌉ after each.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from profattn.analysis.simulation.prefix import PrefixCache, PrefixStats, chain_keys
from profattn.errors import ProfattnError
from profattn.workload.models import ModelConfig
from profattn.workload.requests import RequestTrace

__all__ = ["GIB", "KVCapacity", "Scheduler", "SchedulerConfig", "SchedulerError", "StepPlan", "kv_capacity"]

GIB = 1 << 30


class SchedulerError(ProfattnError):
    """A scheduler setting or a request the configuration cannot serve (names it); exit code 2."""


@dataclass(frozen=True)
class SchedulerConfig:
    """The scheduler's knobs, named and defaulted as vLLM V1 names them for an OpenAI-compatible server on a GPU with
    ≥ 70 GiB (``EngineArgs.get_batch_defaults``: H100, H200, MI300x).

    ``max_num_batched_tokens``: new tokens one step may schedule, decode and prefill together (8192);
    ``max_num_seqs``: requests running at once (1024); ``enable_chunked_prefill``: a prompt longer than the budget
    left is split over steps (True; V1 always chunks); ``block_size``: tokens per KV page (16); ``num_gpu_blocks``:
    pages in the pool (:func:`kv_capacity`); ``enable_prefix_caching``: automatic prefix caching over the trace's block
    ids (vLLM V1's default is on; a trace without block ids has nothing to hit).

    Raises:
        SchedulerError: a non-positive value, one beyond its bound (page size 65,536 tokens, 2**24 batched tokens,
            2**20 sequences, 2**40 pages), or ``max_num_batched_tokens < max_num_seqs`` (vLLM refuses it too:
            every running request must be able to decode in one step).
    """

    num_gpu_blocks: int
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024
    enable_chunked_prefill: bool = True
    block_size: int = 16
    enable_prefix_caching: bool = False

    def __post_init__(self) -> None:
        for f in ("num_gpu_blocks", "max_num_batched_tokens", "max_num_seqs", "block_size"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                name = "page-size (vLLM's block_size)" if f == "block_size" else f.replace("_", "-")
                raise SchedulerError(f"{name} must be a positive integer, got {v!r}")
        for f, top in (("max_num_batched_tokens", 1 << 24), ("max_num_seqs", 1 << 20), ("num_gpu_blocks", 1 << 40)):
            if getattr(self, f) > top:
                raise SchedulerError(f"{f.replace('_', '-')} {getattr(self, f):,} is beyond {top:,}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise SchedulerError(f"max-num-batched-tokens {self.max_num_batched_tokens} is below max-num-seqs "
                                 f"{self.max_num_seqs} (vLLM requires max_num_batched_tokens >= max_num_seqs)")
        if self.block_size > 1 << 16:
            raise SchedulerError(f"page size {self.block_size} is beyond 65,536 tokens")


@dataclass(frozen=True)
class KVCapacity:
    """The KV cache a configuration holds on one GPU. ``bytes_per_token``: every layer's K and V of one token;
    ``page_bytes``: a page of ``block_size`` tokens; ``kv_budget_bytes``: memory given to the cache; ``num_blocks``:
    pages; ``tokens`` = pages × block_size; ``weight_bytes`` / ``activation_bytes``: what the budget set aside (0 when
    the budget was given in tokens); ``gpu_memory_bytes`` / ``gpu_memory_utilization``: the memory it started from
    (None when given in tokens); ``kv_dtype``: the cache's storage (None: the model's dtype)."""

    bytes_per_token: int
    page_bytes: int
    kv_budget_bytes: int
    num_blocks: int
    tokens: int
    block_size: int
    kv_dtype: str | None
    weight_bytes: int = 0
    activation_bytes: int = 0
    gpu_memory_bytes: int | None = None
    gpu_memory_utilization: float | None = None


def activation_bytes(model: ModelConfig, max_num_batched_tokens: int, max_num_seqs: int) -> int:
    """The activation peak vLLM's memory profiling reserves, estimated: a ``max_num_batched_tokens`` forward's widest
    live tensors (Q/K/V out, gate and up out, the activation) in the model's dtype, plus ``max_num_seqs`` rows of
    float32 logits for the sampler's dummy run."""
    tp = model.tensor_parallel
    qkv = (model.q_heads_per_gpu + 2 * model.kv_heads_per_gpu) * model.head_dim
    wide = qkv + 3 * model.intermediate_size // tp
    return max_num_batched_tokens * wide * model.itemsize + max_num_seqs * -(-model.vocab_size // tp) * 4


def kv_capacity(model: ModelConfig, *, block_size: int, kv_dtype: str | None = None, gpu_memory_bytes: int | None = None,
                gpu_memory_utilization: float = 0.9, kv_budget_tokens: int | None = None,
                max_num_batched_tokens: int = 8192, max_num_seqs: int = 1024) -> KVCapacity:
    """Pages of KV cache on one GPU: either ``kv_budget_tokens`` (rounded down to whole pages), or
    ``gpu_memory_utilization × gpu_memory_bytes − weights − activation peak`` (:func:`activation_bytes`) over the
    page's bytes, as vLLM's ``determine_available_memory`` and ``get_kv_cache_config`` size it. An FP8 cache halves
    the bytes per token, so the same memory holds twice the tokens.

    Raises:
        SchedulerError: neither budget, a utilization outside (0, 1], or no room left for a single page.
    """
    per_token = model.kv_bytes_per_token(kv_dtype)
    page = per_token * block_size
    if kv_budget_tokens is not None:
        if kv_budget_tokens < block_size:
            raise SchedulerError(f"kv-budget-tokens {kv_budget_tokens} holds no page of {block_size} tokens")
        blocks = kv_budget_tokens // block_size
        return KVCapacity(per_token, page, blocks * page, blocks, blocks * block_size, block_size, kv_dtype)
    if gpu_memory_bytes is None:
        raise SchedulerError("give the GPU memory (--gpu-memory GiB) or the KV budget (--kv-budget-tokens N)")
    if not 0 < gpu_memory_utilization <= 1:
        raise SchedulerError(f"gpu memory utilization {gpu_memory_utilization} must be in (0, 1]")
    weights = model.weight_bytes_per_gpu
    act = activation_bytes(model, max_num_batched_tokens, max_num_seqs)
    budget = int(gpu_memory_bytes * gpu_memory_utilization) - weights - act
    if budget < page:
        raise SchedulerError(f"{model.label}: {gpu_memory_bytes / GIB:.1f} GiB × {gpu_memory_utilization:g} leaves "
                             f"{max(budget, 0) / GIB:.2f} GiB after {weights / GIB:.1f} GiB of weights and "
                             f"{act / GIB:.2f} GiB of activations: no room for the KV cache")
    blocks = budget // page
    return KVCapacity(per_token, page, budget, blocks, blocks * block_size, block_size, kv_dtype, weights, act,
                      gpu_memory_bytes, gpu_memory_utilization)


@dataclass
class StepPlan:
    """One scheduled step (the general path): ``index`` (the step counter), ``num_decode`` decoding sequences over
    ``decode_kv`` K/V tokens in all (longest ``decode_max_kv``), the prefill chunks as ``(request, new tokens,
    kv_len after)``, and who was ``preempted`` while scheduling it."""

    index: int
    num_decode: int
    decode_kv: int
    decode_max_kv: int
    chunks: list[tuple[int, int, int]]
    preempted: list[int]

    @property
    def tokens(self) -> int:
        """New tokens the step computes."""
        return self.num_decode + sum(n for _, n, _ in self.chunks)


class Scheduler:
    """The policy of the module docstring over one request trace, with the page accounting and the per-request
    record. Times are the caller's (seconds); the scheduler decides who runs and what they cost in pages.

    Request state (lists indexed by request, in the trace's arrival order): ``computed`` (tokens in the cache),
    ``generated`` (output tokens emitted), ``first_token_s``, ``finish_s``, ``preemptions``. The running list is in
    admission order; the decoding ones are kept as sums: sequence ``i`` decoding at step ``s`` attends over
    ``kv = base_i + s`` tokens.

    Raises (constructor):
        SchedulerError: a request that could never run — more tokens (prompt + output − 1) than the pool holds, or,
            without chunked prefill, a prompt + output longer than the token budget (the message names its CSV row).
    """

    def __init__(self, trace: RequestTrace, config: SchedulerConfig, *, audit: bool = False) -> None:
        self.cfg = config
        self.page = config.block_size
        self.audit = audit
        n = len(trace)
        self.n = n
        self.arrival = trace.arrival_s.tolist()
        self.prompt = trace.prompt_tokens.tolist()
        self.output = trace.output_tokens.tolist()
        need = trace.prompt_tokens + trace.output_tokens - 1
        pages = -(-need // self.page)
        if n and int(pages.max()) > config.num_gpu_blocks:
            i = int(np.argmax(pages > config.num_gpu_blocks))
            raise SchedulerError(f"the request at row {int(trace.rows[i])} needs {int(need[i]):,} tokens of KV cache "
                                 f"({int(pages[i]):,} pages); the budget holds {config.num_gpu_blocks * self.page:,}")
        if n and not config.enable_chunked_prefill and int(need.max()) + 1 > config.max_num_batched_tokens:
            i = int(np.argmax(need + 1 > config.max_num_batched_tokens))
            raise SchedulerError(f"without chunked prefill the request at row {int(trace.rows[i])} ({int(need[i]) + 1:,} "
                                 f"tokens) never fits max-num-batched-tokens {config.max_num_batched_tokens:,} (vLLM "
                                 "requires max_num_batched_tokens >= max_model_len then)")
        self.computed = [0] * n
        self.generated = [0] * n
        self.held = [0] * n  # pages held by a request that is not decoding (decoders: from their base)
        self.first_token_s = [math.nan] * n
        self.finish_s = [math.nan] * n
        self.last_token_s = [math.nan] * n  # set at preemption: the time of its last token before it
        self.preemptions = [0] * n
        self.resume_gaps: list[float] = []  # a resumed request's wait between its last token and the next
        self.free = config.num_gpu_blocks
        self.step = 0
        self.running: list[int] = []
        self.resumed: deque[int] = deque()  # preempted requests, at the front of the waiting queue
        self.fresh = 0  # waiting fresh requests are the trace indices [fresh, arrived)
        self.arrived = 0
        self.prefilling: int | None = None  # the request in chunked prefill (the tail of `running`), if any
        # decoding sequences: base, residue counts, finish and longest heaps (lazy deletion by version)
        self.base: dict[int, int] = {}
        self.base_sum = 0
        self.residue = [0] * self.page
        self.version = [0] * n
        self.finish_heap: list[tuple[int, int, int]] = []
        self.longest_heap: list[tuple[int, int, int]] = []
        self.finished = 0
        self.tokens_scheduled = 0  # every token computed (recomputation included)
        self.tokens_discarded = 0  # computed tokens thrown away by preemptions
        self.num_preemptions = 0
        self.peak_pages = 0
        # prefix caching: per request the keys of its full prompt blocks and of the cached blocks it references
        self.cache: PrefixCache | None = None
        self.keys: list[list[int]] = []
        self.shared: list[int] = [0] * n  # how many of its leading blocks it references in the cache
        self.admitted: list[bool] = [False] * n
        self._hit_memo: tuple[int, int, int, int] | None = None  # (request, cache version, blocks, pinned)
        if config.enable_prefix_caching and trace.block_ids is not None:
            try:
                self.cache = PrefixCache(trace.block_tokens, self.page)
            except ValueError as exc:
                raise SchedulerError(f"prefix caching: {exc}") from None
            self.keys = chain_keys(trace.block_ids, trace.prompt_tokens, trace.block_tokens)

    # ---- queues -------------------------------------------------------------------------------------------
    def arrive(self, now: float) -> None:
        """Every request that has arrived by ``now`` joins the waiting queue (behind any resumed ones)."""
        self.arrived = bisect.bisect_right(self.arrival, now, lo=self.arrived)

    def next_arrival(self) -> float:
        """The next request's arrival time (inf when all have arrived)."""
        return self.arrival[self.arrived] if self.arrived < self.n else math.inf

    @property
    def waiting(self) -> int:
        """Requests waiting: resumed ones plus arrived fresh ones."""
        return len(self.resumed) + self.arrived - self.fresh

    @property
    def done(self) -> bool:
        return self.finished == self.n

    def fresh_waiting_since(self, t: float) -> int:
        """Fresh waiting requests (never started) that arrived before ``t``."""
        return bisect.bisect_left(self.arrival, t, lo=self.fresh, hi=self.arrived) - self.fresh

    @property
    def num_decode(self) -> int:
        return len(self.base)

    def decode_kv(self, s: int) -> int:
        """Σ kv_len of the decoding sequences at step ``s``."""
        return self.base_sum + len(self.base) * s

    def decode_shared_kv(self) -> int:
        """K/V tokens the running requests read from a page another running request also reads (prefix caching's
        shared blocks, each extra reference counted: :attr:`PrefixCache.shared_tokens`); 0 without prefix caching or
        with nothing decoding. The prefilling request's references count too (a mixed step's decode call is credited
        with them: an upper bound there); the caller caps it at the decode call's K/V tokens."""
        if self.cache is None or not self.base:
            return 0
        return self.cache.shared_tokens

    def decode_max_base(self) -> int:
        """The largest decoding base (the longest sequence attends over ``base + s``); 0 when none decodes."""
        h = self.longest_heap
        while h and (h[0][1] not in self.base or self.version[h[0][1]] != h[0][2]):
            heapq.heappop(h)
        return -h[0][0] if h else 0

    def _decode_need(self, s: int) -> int:
        """Pages the decoding sequences need at step ``s``: those writing the first token of a new page."""
        return self.residue[(-s) % self.page]

    def _head_tokens(self) -> tuple[int, int] | None:
        """The waiting queue's head and the tokens it asks for (all of them: prompt plus outputs when resumed)."""
        if self.resumed:
            r = self.resumed[0]
        elif self.fresh < self.arrived:
            r = self.fresh
        else:
            return None
        return r, self.prompt[r] + self.generated[r]

    def _hit(self, r: int) -> tuple[int, int]:
        """``(cached leading blocks, pages they pin)`` for waiting request ``r`` (0, 0 without prefix caching)."""
        c = self.cache
        if c is None:
            return 0, 0
        m = self._hit_memo
        if m is not None and m[0] == r and m[1] == c.version:
            return m[2], m[3]
        h, pinned = c.hit(self.keys[r], self.prompt[r])
        self._hit_memo = (r, c.version, h, pinned)
        return h, pinned

    def _shared_pages(self, r: int) -> int:
        return self.shared[r] * self.cache.pages_per_block if self.cache is not None else 0

    def _release(self, r: int) -> int:
        """Drop ``r``'s references to cached blocks; the pages that became free."""
        if self.cache is None or not self.shared[r]:
            return 0
        freed = self.cache.release(self.keys[r][:self.shared[r]])
        self.shared[r] = 0
        return freed

    def _evict(self) -> None:
        if self.cache is not None:
            self.cache.evict_to(self.free)

    @property
    def prefix_stats(self) -> PrefixStats | None:
        """What the prefix cache did (None without one)."""
        return self.cache.stats() if self.cache is not None else None

    def admission_blocked(self, s: int) -> bool:
        """Would the waiting head stay out of step ``s`` (and of every decode-only step after it until a request
        finishes: the pool only shrinks while they decode)? False when nothing waits (the caller then cuts a
        decode-only run at the next arrival, :meth:`decode_run`)."""
        head = self._head_tokens()
        if head is None:
            return False
        if len(self.running) >= self.cfg.max_num_seqs:
            return True
        budget = self.cfg.max_num_batched_tokens - len(self.base)
        if budget <= 0:
            return True
        r, tokens = head
        h, pinned = self._hit(r)
        hit = h * self.cache.block_tokens if h else 0  # type: ignore[union-attr]
        if not self.cfg.enable_chunked_prefill and tokens - hit > budget:
            return True
        new = min(tokens - hit, budget)
        return self._pages(hit + new) - self._pages(hit) + pinned > self.free - self._decode_need(s)

    # ---- decoding set -------------------------------------------------------------------------------------
    def _join(self, r: int, s: int) -> None:
        """``r`` has computed all its tokens after step ``s − 1`` and decodes from step ``s``."""
        b = self.computed[r] + 1 - s
        self.base[r] = b
        self.base_sum += b
        self.residue[(b - 1) % self.page] += 1
        self.version[r] += 1
        v = self.version[r]
        heapq.heappush(self.finish_heap, (s + self.output[r] - self.generated[r] - 1, r, v))
        heapq.heappush(self.longest_heap, (-b, r, v))
        self.held[r] = 0

    def _leave(self, r: int) -> int:
        """Take ``r`` out of the decoding set; returns its base."""
        b = self.base.pop(r)
        self.base_sum -= b
        self.residue[(b - 1) % self.page] -= 1
        return b

    def _pages(self, tokens: int) -> int:
        return -(-tokens // self.page)

    def _preempt_tail(self, s: int, now: float) -> int:
        """Preempt the last running request at the start of step ``s``; returns the pages this step no longer needs
        for it (its need of this step)."""
        r = self.running.pop()
        if r in self.base:
            b = self._leave(r)
            kv_before = b + s - 1  # tokens it holds after step s − 1
            freed = self._pages(kv_before) - self._shared_pages(r)
            need = 1 if kv_before % self.page == 0 else 0
            self.computed[r] = kv_before
            self.generated[r] = kv_before - self.prompt[r] + 1  # its last sampled token is not in the cache yet
            self.last_token_s[r] = now
        else:
            freed = self.held[r]
            need = 0
            self.prefilling = None
        self.tokens_discarded += self.computed[r]
        self.computed[r] = 0
        self.held[r] = 0
        self.free += freed + self._release(r)
        self.preemptions[r] += 1
        self.num_preemptions += 1
        self.resumed.appendleft(r)
        return need

    def schedule(self, now: float) -> StepPlan | None:
        """Schedule step ``self.step`` starting at ``now`` (module docstring, 1–3) and allocate its pages; None when
        nothing can run (nothing running or admissible). A step that only preempted (no token left to compute)
        is a plan with no tokens: the next one admits the resumed requests."""
        s = self.step
        cfg = self.cfg
        budget = cfg.max_num_batched_tokens
        preempted: list[int] = []
        need = self._decode_need(s)
        x = self.prefilling
        x_new = 0
        if x is not None:
            x_new = min(self.prompt[x] + self.generated[x] - self.computed[x], budget - len(self.base))
            need_x = self._pages(self.computed[x] + x_new) - self.held[x] - self._shared_pages(x)
        else:
            need_x = 0
        while need + need_x > self.free and self.running:
            tail = self.running[-1]
            if tail == x:
                self._preempt_tail(s, now)
                x, x_new, need_x = None, 0, 0
            else:
                need -= self._preempt_tail(s, now)
            preempted.append(tail)
        self.free -= need + need_x
        self._evict()
        self._note_peak()
        budget -= len(self.base)
        chunks: list[tuple[int, int, int]] = []
        if x is not None and x_new > 0:
            self.held[x] += need_x
            chunks.append((x, x_new, self.computed[x] + x_new))
            budget -= x_new
        if not preempted:
            while budget > 0 and len(self.running) < cfg.max_num_seqs:
                head = self._head_tokens()
                if head is None:
                    break
                r, tokens = head
                h, pinned = self._hit(r)
                hit = h * self.cache.block_tokens if h else 0  # type: ignore[union-attr]
                if not cfg.enable_chunked_prefill and tokens - hit > budget:
                    break
                new = min(tokens - hit, budget)
                pages = self._pages(hit + new) - self._pages(hit)
                if pages + pinned > self.free:
                    break
                if self.resumed:
                    self.resumed.popleft()
                else:
                    self.fresh += 1
                if self.cache is not None:
                    self.cache.acquire(self.keys[r], h, self.prompt[r], tokens, not self.admitted[r])
                    self.shared[r] = h
                    self.admitted[r] = True
                self.computed[r] = hit
                self.free -= pages + pinned
                self._evict()
                self._note_peak()
                self.held[r] = pages
                self.running.append(r)
                chunks.append((r, new, hit + new))
                budget -= new
                if new < tokens - hit:
                    self.prefilling = r
        if not self.base and not chunks and not preempted:
            return None
        nd = len(self.base)
        return StepPlan(s, nd, self.decode_kv(s), self.decode_max_base() + s if nd else 0, chunks, preempted)

    def complete(self, plan: StepPlan, end: float) -> list[int]:
        """Step ``plan`` ended at ``end``: every computed token is in the cache, the sampled tokens are emitted (module
        docstring, 4); returns the requests that finished."""
        s = plan.index
        self.tokens_scheduled += plan.tokens
        done = self._finish_decoders(s, end)
        for r, new, kv in plan.chunks:
            self.computed[r] = kv
            if self.cache is not None:
                self._cache_blocks(r, kv)
            if kv < self.prompt[r] + self.generated[r]:
                continue  # a chunk: more prompt to go
            if r == self.prefilling:
                self.prefilling = None
            g = self.generated[r]
            if g == 0:
                self.first_token_s[r] = end
            else:
                self.resume_gaps.append(end - self.last_token_s[r])
            self.generated[r] = g + 1
            if g + 1 == self.output[r]:
                self._retire(r, end, self.held[r])
                done.append(r)
            else:
                self._join(r, s + 1)
        self._end_step(s)
        return done

    def _cache_blocks(self, r: int, kv: int) -> None:
        """``r`` has computed ``kv`` tokens: its full prompt blocks beyond those it references become cached (their
        pages move from its own to the cache's), up to the first one another request cached already."""
        c = self.cache
        keys = self.keys[r]
        top = min(len(keys), kv // c.block_tokens)  # type: ignore[union-attr]
        while self.shared[r] < top and c.insert(keys[self.shared[r]]):  # type: ignore[union-attr]
            self.shared[r] += 1
            self.held[r] -= c.pages_per_block  # type: ignore[union-attr]

    def _finish_decoders(self, s: int, end: float) -> list[int]:
        """Decoders whose last token was step ``s``: retired at ``end`` (their pages freed)."""
        h = self.finish_heap
        done = []
        while h and h[0][0] <= s:
            _, r, v = heapq.heappop(h)
            if r not in self.base or self.version[r] != v:
                continue
            b = self._leave(r)
            self.generated[r] = self.output[r]
            self.computed[r] = b + s
            self._retire(r, end, self._pages(b + s) - self._shared_pages(r))
            done.append(r)
        return done

    def _retire(self, r: int, end: float, pages: int) -> None:
        """``r`` finished at ``end``: its ``pages`` (those it does not share through the cache) and its cached
        blocks' references are freed."""
        self.running.remove(r)
        self.free += pages + self._release(r)
        self.held[r] = 0
        self.finish_s[r] = end
        self.finished += 1

    def _note_peak(self) -> None:
        used = self.cfg.num_gpu_blocks - self.free
        if used > self.peak_pages:
            self.peak_pages = used

    def _end_step(self, s: int) -> None:
        if self.audit:
            self.check_pages(s)
        self.step = s + 1

    def check_pages(self, s: int) -> None:
        """Audit after step ``s``: pages in use = Σ ⌈len / page⌉ over every running request, nothing else held.

        Raises:
            AssertionError: the running count disagrees with the per-request sum.
        """
        total = 0
        for r in self.running:
            own = self._shared_pages(r)
            if r in self.base:
                total += self._pages(self.base[r] + s) - own
            else:
                total += self._pages(self.computed[r]) - own
                assert self.held[r] == self._pages(self.computed[r]) - own, (r, self.held[r], self.computed[r])
        if self.cache is not None:  # the cached blocks running requests reference, once each
            total += sum(1 for v in self.cache.ref.values() if v > 0) * self.cache.pages_per_block
            assert self.cache.evictable_pages <= self.free, "a cached free block is counted as in use"
            for r in self.running:
                assert all(self.cache.ref.get(k, 0) > 0 for k in self.keys[r][:self.shared[r]]), r
        used = self.cfg.num_gpu_blocks - self.free
        assert used == total, f"step {s}: {used} pages in use, Σ ⌈len / page⌉ = {total}"

    # ---- decode-only runs --------------------------------------------------------------------------------
    def decode_run(self, max_steps: int) -> int:
        """How many decode-only steps, from step ``self.step``, run unchanged with no event: nothing in chunked
        prefill, no waiting request admissible (the caller cuts the run at the next arrival when nothing waits),
        no decoder finishing before the last of them, the pool never short. 0 when the next step needs the general
        path."""
        if self.audit or self.prefilling is not None or not self.base:
            return 0
        s = self.step
        if self.waiting and not self.admission_blocked(s):
            return 0
        h = self.finish_heap
        while h and (h[0][1] not in self.base or self.version[h[0][1]] != h[0][2]):
            heapq.heappop(h)
        k = min(max_steps, h[0][0] - s + 1)
        if k <= 0:
            return 0
        if len(self.base) * -(-k // self.page) > self.free:  # the pool might run short: find the step exactly
            cum = np.cumsum(np.asarray(self.residue)[(-(s + np.arange(k))) % self.page])
            if cum[-1] > self.free:
                k = int(np.searchsorted(cum, self.free, side="right"))
        return k

    def _run_pages(self, s: int, k: int) -> int:
        """Pages the decoding sequences allocate over steps ``s … s + k − 1``: a sequence of residue ``φ`` (its
        first page-opening step) needs one at each step ``j`` with ``(φ + j) % page == 0``."""
        page = self.page
        total = 0
        for phi, count in enumerate(self.residue):
            if count:
                j0 = (-phi - s) % page
                if j0 < k:
                    total += count * ((k - 1 - j0) // page + 1)
        return total

    def advance_decode(self, k: int, end: float) -> tuple[list[int], int]:
        """``k`` decode-only steps (from :meth:`decode_run`), the last ending at ``end`` (seconds): pages allocated,
        tokens emitted, the last step's finishers retired; returns them and the pages in use after the run's
        allocations (before they left)."""
        s = self.step
        self.free -= self._run_pages(s, k)
        self._evict()
        self._note_peak()
        used = self.cfg.num_gpu_blocks - self.free
        self.tokens_scheduled += k * len(self.base)
        done = self._finish_decoders(s + k - 1, end)
        self._end_step(s + k - 1)
        return done, used

    @property
    def pages_in_use(self) -> int:
        """Pages allocated now."""
        return self.cfg.num_gpu_blocks - self.free

    def decode_sequences(self, s: int) -> list[int]:
        """Every decoding sequence's kv_len at step ``s`` (for a step's export)."""
        return [b + s for b in self.base.values()]
