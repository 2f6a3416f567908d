"""Request traces: the load a serving simulation replays (when each request arrives, its prompt and output length).

Torch-free. A trace is read from CSV in one of two layouts:

* ``arrived_at, num_prefill_tokens, num_decode_tokens`` — seconds from the first request, prompt tokens, generated
  tokens (the processed traces of Microsoft's Vidur simulator, e.g. its ``data/processed_traces/splitwise_conv.csv``:
  the Azure LLM inference trace 2023, conversation);
* ``TIMESTAMP, ContextTokens, GeneratedTokens`` — the Azure public dataset's native columns
  (``AzureLLMInferenceTrace_conv.csv``; timestamps such as ``2023-11-16 18:15:46.6805900``, taken relative to the first).

or from JSON lines in the Mooncake trace release's layout (``kvcache-ai/Mooncake``, ``FAST25-release/traces``):
``timestamp`` (ms from the first request), ``input_length``, ``output_length`` and ``hash_ids`` — the prompt's KV
blocks of :data:`MOONCAKE_BLOCK_TOKENS` tokens as ids, equal ids meaning the same cached prefix block (the last
block may be partial) — which a prefix-caching simulation hits (:attr:`RequestTrace.block_ids`);

or drawn as a synthetic Poisson load (:func:`synthetic_trace`; ``--requests poisson:rate=5.5,n=2000,prompt=1020,
output=129``): exponential inter-arrival times, lognormal prompt and output lengths given by their medians.

Every bad row is one error naming the file, the line (the header is line 1) and the field.
"""

from __future__ import annotations

import csv
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from profattn.errors import ProfattnError

__all__ = ["MAX_RATE_PER_S", "MAX_TOKENS", "MOONCAKE_BLOCK_TOKENS", "RequestError", "RequestTrace", "load_requests", "parse_synthetic_spec", "synthetic_trace"]

#: Longest prompt or output a trace may give (the workload layer's bound on one sequence's length, 2**28).
MAX_TOKENS = 1 << 28
MAX_ARRIVAL_S = 1e9  # ~32 years: beyond it float64 seconds no longer resolve a step's microseconds
#: Arrival rates a load may have, req/s: within [1 / MAX_RATE_PER_S, MAX_RATE_PER_S] (past these, arrival times lose a
#: step's µs in float64).
MAX_RATE_PER_S = 1e6
#: Tokens per ``hash_ids`` block of the Mooncake traces.
MOONCAKE_BLOCK_TOKENS = 512
_NATIVE = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
_AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


class RequestError(ProfattnError, ValueError):
    """A request trace that cannot be used (names the file and line, or the field); exit code 2."""


@dataclass(frozen=True)
class RequestTrace:
    """Requests in arrival order. ``arrival_s``: float64 ``[n]``, seconds, non-decreasing, the first at its own time
    (0 for a trace read from CSV); ``prompt_tokens`` / ``output_tokens``: int64 ``[n]``, ≥ 1 each; ``rows``: int64
    ``[n]``, the CSV line of each request (the header is line 1; for a synthetic trace the request's index + 1), so an
    error about a request can name its row; ``source``: the file or the synthetic spec; ``rate_scale``: the factor the
    arrival rate was multiplied by (:meth:`scaled`); ``block_ids``: per request its prompt's KV blocks of
    ``block_tokens`` tokens as ids (int64 arrays, ⌈prompt / block_tokens⌉ each; equal ids at the same position after
    equal ids are the same prefix), None when the trace carries none."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    rows: np.ndarray
    source: str
    rate_scale: float = 1.0
    block_ids: tuple[np.ndarray, ...] | None = None
    block_tokens: int = 0

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    @property
    def duration_s(self) -> float:
        """Seconds from the first arrival to the last (0 for one request)."""
        return float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) else 0.0

    @property
    def rate_per_s(self) -> float:
        """Mean arrival rate, requests per second: ``(n − 1) / duration`` (inf when every request arrives at once)."""
        return (len(self) - 1) / self.duration_s if self.duration_s > 0 else math.inf

    def scaled(self, factor: float) -> "RequestTrace":
        """The same requests at ``factor`` × the arrival rate (every arrival time divided by ``factor``).

        Raises:
            RequestError: ``factor`` not a positive finite number.
        """
        if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 0):
            raise RequestError(f"rate scale must be a positive number, got {factor!r}")
        return RequestTrace(self.arrival_s / factor, self.prompt_tokens, self.output_tokens, self.rows, self.source,
                            self.rate_scale * factor, self.block_ids, self.block_tokens)

    def head(self, n: int) -> "RequestTrace":
        """The first ``n`` requests."""
        return RequestTrace(self.arrival_s[:n], self.prompt_tokens[:n], self.output_tokens[:n], self.rows[:n],
                            self.source, self.rate_scale, None if self.block_ids is None else self.block_ids[:n],
                            self.block_tokens)


def _bad(path: Path, line: int, field: str, raw: str, why: str) -> RequestError:
    return RequestError(f"{path.name} line {line}: {field} {raw!r} {why}")


def load_requests(path: str | Path) -> RequestTrace:
    """Read a request trace from CSV (either layout of the module docstring; extra columns are ignored). Requests
    are put in arrival order (a stable sort: rows with equal times keep their order) and the times made relative to
    the first.

    Raises:
        RequestError: no such file, not CSV, neither layout's columns, no rows, or a row whose time is not a finite
            number ≥ 0 (or an unreadable timestamp) or whose token count is not an integer in [1, 2**28] — the
            message names the line and the field (``conv.csv line 7: num_decode_tokens '-3' must be ≥ 1``).
    """
    import pandas as pd

    path = Path(path)
    if path.is_dir():
        raise RequestError(f"--requests {path}: is a directory; give a CSV file")
    if not path.is_file():
        raise RequestError(f"--requests {path}: " + ("not a regular file" if path.exists() else "no such file"))
    if path.suffix.lower() in (".jsonl", ".json"):
        return _load_jsonl(path)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise RequestError(f"--requests {path.name}: not a CSV request trace ({str(exc).splitlines()[0]})") from None
    if not isinstance(df.index, pd.RangeIndex):  # every row has more fields than the header: pandas shifted them
        extra = df.index.nlevels
        tail = df.iloc[:, -extra:]
        if (tail != "").to_numpy().any():
            raise RequestError(f"--requests {path.name}: its rows have {len(df.columns) + extra} fields, its header "
                               f"{len(df.columns)}: name every column in the header")
        with warnings.catch_warnings():  # trailing commas: the fields dropped are empty (checked above)
            warnings.simplefilter("ignore", pd.errors.ParserWarning)
            df = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True, index_col=False)
    with open(path, encoding="utf-8", errors="replace", newline="") as fh:  # pandas renames a repeated name (x.1)
        header = [c.strip() for c in next(csv.reader(fh), [])]
    twice = sorted({c for c in header if c and header.count(c) > 1})
    if twice:
        raise RequestError(f"--requests {path.name}: column {twice[0]!r} appears {header.count(twice[0])} times in the "
                           "header; which one is meant is not clear")
    cols = [c.strip() for c in df.columns]
    df.columns = cols
    if all(c in cols for c in _NATIVE):
        t_col, p_col, o_col = _NATIVE
        native = True
    elif all(c in cols for c in _AZURE):
        t_col, p_col, o_col = _AZURE
        native = False
    else:
        raise RequestError(f"--requests {path.name}: expected columns {', '.join(_NATIVE)} (or Azure's "
                           f"{', '.join(_AZURE)}); found {', '.join(cols) or 'none'}")
    if df.empty:
        raise RequestError(f"--requests {path.name}: no requests (only a header)")
    lines = np.arange(2, len(df) + 2, dtype=np.int64)
    if native:
        t = pd.to_numeric(df[t_col].str.strip(), errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(t) | (t < 0)
        if bad.any():
            i = int(np.argmax(bad))
            raise _bad(path, int(lines[i]), t_col, df[t_col].iloc[i], "is not a time in seconds ≥ 0")
        late = t > MAX_ARRIVAL_S
        if late.any():
            i = int(np.argmax(late))
            raise _bad(path, int(lines[i]), t_col, df[t_col].iloc[i], f"is beyond {MAX_ARRIVAL_S:g} s")
    else:
        ts = pd.to_datetime(df[t_col].str.strip(), errors="coerce", format="mixed")
        bad = ts.isna().to_numpy()
        if bad.any():
            i = int(np.argmax(bad))
            raise _bad(path, int(lines[i]), t_col, df[t_col].iloc[i], "is not a timestamp")
        t = (ts - ts.min()).dt.total_seconds().to_numpy(dtype=np.float64)
    counts = []
    for col in (p_col, o_col):
        raw = df[col].str.strip()
        ok = raw.str.fullmatch(r"-?[0-9]+").fillna(False).to_numpy()
        if not ok.all():
            i = int(np.argmax(~ok))
            raise _bad(path, int(lines[i]), col, df[col].iloc[i], "is not an integer")
        v = raw.str.len().to_numpy() <= 10  # an int64 cannot overflow below 11 digits
        if not v.all():
            i = int(np.argmax(~v))
            raise _bad(path, int(lines[i]), col, df[col].iloc[i], f"is beyond {MAX_TOKENS:,} tokens")
        n = raw.astype(np.int64).to_numpy()
        low, high = n < 1, n > MAX_TOKENS
        if low.any():
            i = int(np.argmax(low))
            raise _bad(path, int(lines[i]), col, df[col].iloc[i], "must be ≥ 1")
        if high.any():
            i = int(np.argmax(high))
            raise _bad(path, int(lines[i]), col, df[col].iloc[i], f"is beyond {MAX_TOKENS:,} tokens")
        counts.append(n)
    order = np.argsort(t, kind="stable")
    t = t[order]
    return RequestTrace(t - t[0], counts[0][order], counts[1][order], lines[order], str(path))


def _load_jsonl(path: Path) -> RequestTrace:
    """The Mooncake layout (module docstring), one JSON object a line (blank lines skipped).

    Raises:
        RequestError: a line that is not a JSON object with the four fields, a timestamp not a finite number ≥ 0, a
            length not an integer in [1, 2**28], ``hash_ids`` not ⌈input_length / 512⌉ non-negative integers.
    """
    import json

    times, prompts, outputs, lines, blocks = [], [], [], [], []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line_no, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                d = json.loads(text)
            except json.JSONDecodeError as exc:
                raise RequestError(f"{path.name} line {line_no}: not JSON ({exc.msg})") from None
            if not isinstance(d, dict) or any(k not in d for k in ("timestamp", "input_length", "output_length", "hash_ids")):
                raise RequestError(f"{path.name} line {line_no}: expected an object with timestamp, input_length, "
                                   "output_length and hash_ids")
            t = d["timestamp"]
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or not 0 <= t <= MAX_ARRIVAL_S * 1e3:
                raise _bad(path, line_no, "timestamp", str(t), "is not a time in ms ≥ 0")
            for f in ("input_length", "output_length"):
                v = d[f]
                if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_TOKENS:
                    raise _bad(path, line_no, f, str(v), f"is not an integer in [1, {MAX_TOKENS:,}]")
            ids = d["hash_ids"]
            want = -(-d["input_length"] // MOONCAKE_BLOCK_TOKENS)
            if (not isinstance(ids, list) or len(ids) != want
                    or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 1 << 62 for i in ids)):
                raise _bad(path, line_no, "hash_ids", str(ids)[:40], f"is not {want} block ids (⌈input_length / "
                           f"{MOONCAKE_BLOCK_TOKENS}⌉ non-negative integers)")
            times.append(float(t) / 1e3)
            prompts.append(d["input_length"])
            outputs.append(d["output_length"])
            lines.append(line_no)
            blocks.append(np.asarray(ids, dtype=np.int64))
    if not times:
        raise RequestError(f"--requests {path.name}: no requests")
    t = np.asarray(times)
    order = np.argsort(t, kind="stable")
    t = t[order]
    return RequestTrace(t - t[0], np.asarray(prompts, dtype=np.int64)[order], np.asarray(outputs, dtype=np.int64)[order],
                        np.asarray(lines, dtype=np.int64)[order], str(path), 1.0,
                        tuple(blocks[i] for i in order), MOONCAKE_BLOCK_TOKENS)


def synthetic_trace(*, rate_per_s: float, n: int, prompt_median: float, output_median: float,
                    prompt_sigma: float = 1.0, output_sigma: float = 1.0, seed: int = 0) -> RequestTrace:
    """A Poisson load: ``n`` requests with exponential inter-arrival times at ``rate_per_s`` (the first at 0), prompt
    and output lengths lognormal with the given medians (tokens) and log-space standard deviations, rounded and
    clipped to [1, 2**28]. Deterministic for a ``seed`` (numpy's PCG64).

    Raises:
        RequestError: a non-positive rate, count, median or a negative sigma; a rate outside [1e-6, 1e6] req/s.
    """
    for name, v in (("rate", rate_per_s), ("n", n), ("prompt", prompt_median), ("output", output_median)):
        if not (math.isfinite(v) and v > 0):
            raise RequestError(f"--requests poisson: {name} must be > 0, got {v}")
    if not 1.0 / MAX_RATE_PER_S <= rate_per_s <= MAX_RATE_PER_S:
        raise RequestError(f"--requests poisson: rate {rate_per_s:g} is outside [{1.0 / MAX_RATE_PER_S:g}, "
                           f"{MAX_RATE_PER_S:g}] req/s")
    for name, v in (("prompt_sigma", prompt_sigma), ("output_sigma", output_sigma)):
        if not (math.isfinite(v) and v >= 0):
            raise RequestError(f"--requests poisson: {name} must be ≥ 0, got {v}")
    if n > 1 << 24:
        raise RequestError(f"--requests poisson: n {n} is more than {1 << 24} requests")
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate_per_s, size=n)
    gaps[0] = 0.0
    lengths = []
    for median, sigma in ((prompt_median, prompt_sigma), (output_median, output_sigma)):
        x = np.rint(np.exp(rng.normal(math.log(median), sigma, size=n)))
        lengths.append(np.clip(x, 1, MAX_TOKENS).astype(np.int64))
    spec = (f"poisson:rate={rate_per_s:g},n={n},prompt={prompt_median:g}:{prompt_sigma:g},"
            f"output={output_median:g}:{output_sigma:g},seed={seed}")
    return RequestTrace(np.cumsum(gaps), lengths[0], lengths[1], np.arange(1, n + 1, dtype=np.int64), spec)


_NUM = r"[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?"


def parse_synthetic_spec(text: str) -> RequestTrace:
    """The trace of ``poisson:rate=R,n=N,prompt=MEDIAN[:SIGMA],output=MEDIAN[:SIGMA][,seed=S]`` (sigma default 1.0,
    seed 0); see :func:`synthetic_trace`.

    Raises:
        RequestError: not that grammar (names the item), a missing field, or :func:`synthetic_trace`'s checks.
    """
    head, _, body = str(text).partition(":")
    if head != "poisson":
        raise RequestError(f"--requests {text!r}: a synthetic load is poisson:rate=R,n=N,prompt=MEDIAN,output=MEDIAN")
    values: dict[str, str] = {}
    for item in (s.strip() for s in body.split(",") if s.strip()):
        key, eq, raw = (s.strip() for s in item.partition("="))
        if not eq or key not in ("rate", "n", "prompt", "output", "seed") or key in values:
            raise RequestError(f"--requests poisson: {item!r} is not one of rate=, n=, prompt=, output=, seed= (once each)")
        values[key] = raw
    missing = [k for k in ("rate", "n", "prompt", "output") if k not in values]
    if missing:
        raise RequestError(f"--requests poisson: {', '.join(missing)} missing")
    kw: dict[str, float | int] = {}
    for key, names in (("prompt", ("prompt_median", "prompt_sigma")), ("output", ("output_median", "output_sigma"))):
        m = re.fullmatch(rf"({_NUM})(?::({_NUM}))?", values[key])
        if not m:
            raise RequestError(f"--requests poisson: {key}={values[key]!r} is not MEDIAN or MEDIAN:SIGMA")
        kw[names[0]] = float(m.group(1))
        if m.group(2) is not None:
            kw[names[1]] = float(m.group(2))
    if not re.fullmatch(_NUM, values["rate"]):
        raise RequestError(f"--requests poisson: rate={values['rate']!r} is not a number")
    for key in ("n", "seed"):
        if key in values and not re.fullmatch(r"[0-9]+", values[key]):
            raise RequestError(f"--requests poisson: {key}={values[key]!r} is not a non-negative integer")
    return synthetic_trace(rate_per_s=float(values["rate"]), n=int(values["n"]), seed=int(values.get("seed", 0)), **kw)  # type: ignore[arg-type]
