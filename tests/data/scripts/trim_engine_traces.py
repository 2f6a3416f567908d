"""Copy vLLM's engine traces (AMD-AGI/TraceLens ``tests/traces/inference/``, MIT) into tests/data/engine-traces/
without their ``python_function`` events (``with_stack=True``'s Python call tree: 91 % of the capture traces'
events, never read by profattn). Every other event, the metadata and the files beside the traces
(``execution_details.json``, ``tracelens_csvs/``) are copied unchanged.

Run: python tests/data/scripts/trim_engine_traces.py SOURCE_DIR tests/data/engine-traces
(SOURCE_DIR holds ``vllm_decode_full/`` and ``vllm_prefilldecode_piecewise/``).
"""

import gzip
import json
import shutil
import sys
from pathlib import Path


def main(source: Path, target: Path) -> None:
    for path in sorted(source.rglob("*")):
        if not path.is_file():
            continue
        out = target / path.relative_to(source)
        out.parent.mkdir(parents=True, exist_ok=True)
        if not path.name.endswith(".json.gz"):
            shutil.copyfile(path, out)
            continue
        with gzip.open(path, "rt", encoding="utf-8") as f:
            doc = json.load(f)
        before = len(doc["traceEvents"])
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "python_function"]
        with gzip.GzipFile(out, "wb", compresslevel=9, mtime=0) as f:
            f.write(json.dumps(doc).encode("utf-8"))
        print(f"{out}: {before} -> {len(doc['traceEvents'])} events, {out.stat().st_size} bytes")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
