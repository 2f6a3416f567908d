"""The analysis layer: cell evidence, ledgers, winners and verdicts, attention calls in any trace, run
comparison and its statistics. Torch-free; produces typed records, never display text."""
