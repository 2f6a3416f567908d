"""The process ncu launches for the counter pass (see :mod:`profattn.harness.ncu`).

``python -m profattn.harness.counter_child RUN_DIR CELLS_FILE``: for each cell id in ``CELLS_FILE`` (one per
line), rebuild the cell from ``RUN_DIR/results.json``, warm it up, and run one call between
``cudaProfilerStart``/``cudaProfilerStop`` inside an NVTX start/end range named after the cell.
A cell that fails here is skipped (its id and error go to stderr); the others still run.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    import torch

    from profattn.backends import get_backend
    from profattn.harness.cell import calls_for
    from profattn.harness.inputs import make_inputs
    from profattn.results import read_results

    run_dir, cells_file = Path(argv[0]), Path(argv[1])
    run = read_results(run_dir)
    wanted = [l.strip() for l in cells_file.read_text(encoding="utf-8").splitlines() if l.strip()]
    cells = {c.cell_id: c for c in run.cells}
    device = torch.device("cuda")
    tags = list(dict.fromkeys(c.workload.tag for c in run.cells))
    inputs_cache: dict[str, object] = {}
    for cid in wanted:
        cell = cells[cid]
        w = cell.workload
        try:
            if w.tag not in inputs_cache:
                inputs_cache.clear()
                torch.cuda.empty_cache()
                inputs_cache[w.tag] = make_inputs(w, device, seed=run.seed * 1000 + tags.index(w.tag))
            inputs = inputs_cache[w.tag]
            backend = get_backend(cell.backend)
            prepared = backend.prepare(w, device)
            with prepared.context():
                _, call = calls_for(prepared, w, inputs)
                for _ in range(2):
                    inputs.zero_grads()
                    call()
                inputs.zero_grads()
                torch.cuda.synchronize()
                rid = torch.cuda.nvtx.range_start(cid)
                torch.cuda.profiler.start()
                call()
                torch.cuda.synchronize()
                torch.cuda.profiler.stop()
                torch.cuda.nvtx.range_end(rid)
                inputs.zero_grads()
        except Exception as exc:  # noqa: BLE001 - one cell must not lose the pass
            print(f"profattn counter pass: {cid}: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}",
                  file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
