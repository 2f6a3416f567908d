"""Context parallelism's layout and communication ledger, by formula (torch-free).

A context-parallel workload (:attr:`Workload.cp_ranks` ≥ 2) splits one self-attention sequence of ``L`` tokens over
``R`` ranks. Which tokens a rank holds (:func:`shard_chunks`):

- ``ring``, ``allgather``, ``torch-cp``: causal load balancing — the sequence is cut into ``2R`` chunks of
  ``c = L / 2R`` tokens and rank ``i`` holds chunks ``i`` and ``2R − 1 − i`` (an early and a late one, so every rank
  attends to about as many causal pairs; PyTorch's head-tail balancer, zigzag ring attention);
- ``ulysses``: rank ``i`` holds the contiguous tokens ``[i·L/R, (i+1)·L/R)``.

The ledger (:func:`cp_ledger`) counts what one rank sends (and, by symmetry, receives) in one call — forward, plus
backward for ``train`` — as each collective's *logical* payload: an all-gather of ``n`` elements per rank sends them
to ``R − 1`` peers (``(R − 1)·n``), an equal-split all-to-all of ``N`` elements keeps ``N / R`` and sends the rest
(``N·(R − 1)/R``), a point-to-point send/receive moves its tensor once. The traced sizes are converted by the same
rules (:mod:`profattn.analysis.calls.comm`), so the two are compared like for like. With ``n_kv = B·Hkv·(L/R)·d`` (one rank's
K elements), ``n_q = B·Hq·(L/R)·d``, ``s`` the dtype's bytes and ``a = max(s, 4)`` (gradient accumulators, fp32):

==========  ======================================  ==================================================
scheme      forward (sent = received)               backward (train, added)
==========  ======================================  ==================================================
ring        K, V passed R − 1 times: 2(R−1)·n_kv·s  K, V again R − 1 times, dK, dV accumulators R times:
                                                    2(R−1)·n_kv·s + 2R·n_kv·a
allgather   K, V all-gathered: 2(R−1)·n_kv·s        dK, dV of the gathered K/V returned by an all-to-all:
                                                    2(R−1)·n_kv·s
ulysses     Q, K, V to heads, O back:               dO to heads, dQ, dK, dV back:
            (2·n_q + 2·n_kv)·(R−1)/R·s              (2·n_q + 2·n_kv)·(R−1)/R·s
torch-cp    PyTorch's own rotation: not counted (its collectives are in the trace)
==========  ======================================  ==================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from profattn.workload.contract import CpScheme, Phase, Workload


def shard_chunks(w: Workload, rank: int) -> tuple[tuple[int, int], ...]:
    """Token ranges ``(start, stop)`` of the global sequence that ``rank`` holds, in its local order (see the
    module docstring). Example: ``q_len=16, cp_ranks=2``: ring rank 0 → ``((0, 4), (12, 16))``, ulysses rank 1 →
    ``((8, 16),)``.

    Raises:
        ValueError: the workload is not context parallel, or ``rank`` is outside ``[0, cp_ranks)``.
    """
    r = w.cp_ranks
    if r < 2 or not 0 <= rank < r:
        raise ValueError(f"rank {rank} of a workload with cp_ranks {r}")
    if w.cp_scheme is CpScheme.ULYSSES:
        n = w.q_len // r
        return ((rank * n, (rank + 1) * n),)
    c = w.q_len // (2 * r)
    a, b = rank, 2 * r - 1 - rank
    return ((a * c, (a + 1) * c), (b * c, (b + 1) * c))


@dataclass(frozen=True)
class CommLedger:
    """Bytes one rank sends and receives in one call (forward, plus backward for train), by formula.

    ``items``: ``(what, bytes sent)`` lines in the order the scheme moves them; ``counted`` False for a scheme whose
    collectives profattn does not choose (``torch-cp``), whose traced bytes are reported without a formula."""

    sent_bytes: int
    received_bytes: int
    items: tuple[tuple[str, int], ...]
    counted: bool = True


def cp_ledger(w: Workload) -> CommLedger:
    """The communication ledger of one rank of ``w`` (module docstring's table); every rank moves the same bytes.

    Raises:
        ValueError: the workload is not context parallel.
    """
    r = w.cp_ranks
    if r < 2:
        raise ValueError("the communication ledger needs cp_ranks >= 2")
    s, a = w.itemsize, max(w.itemsize, 4)
    local = w.q_len // r
    n_kv = w.batch * w.num_kv_heads * local * w.head_dim
    n_q = w.batch * w.num_q_heads * local * w.head_dim
    train = w.phase is Phase.TRAIN
    items: list[tuple[str, int]] = []
    if w.cp_scheme is CpScheme.RING:
        items.append(("K, V blocks passed (forward)", 2 * (r - 1) * n_kv * s))
        if train:
            items.append(("K, V blocks passed (backward)", 2 * (r - 1) * n_kv * s))
            items.append(("dK, dV accumulators passed", 2 * r * n_kv * a))
    elif w.cp_scheme is CpScheme.ALLGATHER:
        items.append(("K, V all-gathered", 2 * (r - 1) * n_kv * s))
        if train:
            items.append(("dK, dV returned (all-to-all)", 2 * (r - 1) * n_kv * s))
    elif w.cp_scheme is CpScheme.ULYSSES:
        items.append(("Q, K, V to heads, O back (all-to-all)", (2 * n_q + 2 * n_kv) * (r - 1) // r * s))
        if train:
            items.append(("dO to heads, dQ, dK, dV back (all-to-all)", (2 * n_q + 2 * n_kv) * (r - 1) // r * s))
    else:
        return CommLedger(0, 0, (), counted=False)
    total = sum(b for _, b in items)
    return CommLedger(total, total, tuple(items))
