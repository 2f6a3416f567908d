"""Shared small pieces below every analysis room: the one noise rule (:mod:`.margins`: ``JudgedTime``, ``Margin``,
``judged_margin``, ``NOISE_FRACTION``), the statistics behind it and behind run comparison (:mod:`.stats`:
Hodges–Lehmann, Mann–Whitney, paired signed-rank, Holm, Student's t) and the names every room keys kernels by (:mod:`.names`:
``kernel_stem``). In: timed cells, samples, kernel names; out: small typed records and numbers. Imports no other
analysis room."""
