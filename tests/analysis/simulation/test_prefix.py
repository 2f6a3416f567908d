"""Prefix caching (vLLM's automatic prefix caching) by hand: chained keys, the prompt − 1 cap on a hit, pinned pages,
references released tail first, LRU eviction, and the scheduler's page audit with shared blocks."""

from __future__ import annotations

import numpy as np

from factories import drive
from profattn.analysis.simulation.prefix import PrefixCache, chain_keys
from profattn.analysis.simulation.scheduler import Scheduler, SchedulerConfig
from profattn.workload.requests import RequestTrace


def test_chained_keys_hit_only_after_the_same_prefix():
    # ids (0, 1) then (2, 1): block 1 of the second follows another parent, so its key differs
    keys = chain_keys([np.array([0, 1, 5]), np.array([2, 1]), np.array([0, 1])], np.array([1100, 1024, 1024]), 512)
    assert keys == [[0, 1], [2, 3], [0, 1]]  # the 76-token tail block of the first is not full: no key


def test_hit_pins_releases_and_evicts_lru():
    c = PrefixCache(512, 16)  # 32 pages a block
    assert c.insert(10) and c.insert(11) and not c.insert(10)
    assert c.hit([10, 11], 1024) == (1, 0)  # 1,024 tokens: at most 1,023 hit, one block
    assert c.hit([10, 11], 1025) == (2, 0)  # both referenced (ref 1): nothing pinned
    assert c.release([10, 11]) == 64 and list(c.evictable) == [11, 10]  # the tail block first in line
    assert c.hit([10, 11], 2000) == (2, 64)  # nobody references them: admitting pins 64 pages
    c.evict_to(32)  # 32 free pages hold only one cached block: 11 goes
    assert list(c.ref) == [10] and c.evicted_blocks == 1 and c.hit([10, 11], 2000) == (1, 32)


def test_scheduler_shares_a_prefix_once_and_saves_its_prefill():
    # two requests with the same 2-block prefix; the second arrives after the first's prompt is computed
    tr = RequestTrace(np.array([0.0, 1.0]), np.array([1100, 1100]), np.array([50, 50]), np.array([2, 3]), "t",
                      block_ids=(np.array([7, 8, 9]), np.array([7, 8, 4])), block_tokens=512)
    s = Scheduler(tr, SchedulerConfig(num_gpu_blocks=400, enable_prefix_caching=True), audit=True)
    chunks = [(r, new, kv) for p in drive(s) for r, new, kv in p.chunks]
    assert chunks == [(0, 1100, 1100), (1, 76, 1100)]  # 1,024 tokens hit: only the tail is prefilled
    st = s.prefix_stats
    assert (st.hit_blocks, st.queried_blocks, st.hit_tokens) == (2, 4, 1024) and s.pages_in_use == 0


def test_shared_tokens_count_each_extra_reference():
    c = PrefixCache(512, 16)
    assert c.insert(1) and c.insert(2) and c.shared_tokens == 0  # one request holds both blocks
    c.acquire([1, 2], 2, 1100, 1100, True)  # a second request reads both from the same pages
    assert c.extra_refs == 2 and c.shared_tokens == 1024
    c.acquire([1], 1, 1100, 1100, True)  # a third reads the first
    assert c.shared_tokens == 1536
    c.release([1, 2])  # the second leaves
    assert c.shared_tokens == 512 and c.ref == {1: 2, 2: 1}
    c.release([1])
    c.release([1, 2])  # nobody reads them: cached, free, nothing shared
    assert c.shared_tokens == 0 and list(c.evictable) == [2, 1]


def test_scheduler_reports_the_decoders_shared_tokens():
    # the second request arrives while the first decodes: both read the first block (512 tokens) from one page set
    tr = RequestTrace(np.array([0.0, 0.001]), np.array([600, 600]), np.array([40, 40]), np.array([2, 3]), "t",
                      block_ids=(np.array([7, 8]), np.array([7, 5])), block_tokens=512)
    s = Scheduler(tr, SchedulerConfig(num_gpu_blocks=400, enable_prefix_caching=True), audit=True)
    seen = [(p.num_decode, s.decode_shared_kv()) for p in drive(s)]
    assert (1, 0) in seen and (2, 512) in seen  # one decoder: nothing shared; two: one block read twice
    assert s.decode_shared_kv() == 0
