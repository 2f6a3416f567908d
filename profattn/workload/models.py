"""Transformer model configurations for serving simulations: the attention shape (layers, query and KV heads,
head_dim, dtype) and the rest of a step (hidden size, MLP width, vocabulary), per GPU at a tensor-parallel size.

Torch-free. The named configurations carry the fields of each model's published Hugging Face ``config.json``
(``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``, ``hidden_size``, ``intermediate_size``,
``vocab_size``, ``tie_word_embeddings``, the Q/K/V projection bias of Qwen2); the parameter count is derived from
them (:attr:`ModelConfig.num_params`) and agrees with each model card's published count to 0.1 % (tests).

``--model`` text (:func:`parse_model_spec`): a name (``llama-3-8b``), optionally with ``tp=N`` and field overrides
(``llama-3-70b,tp=8``), or every field given (``layers=32,hq=32,hkv=8,d=128,hidden=4096,intermediate=14336,
vocab=128256``). Tensor parallelism follows vLLM's sharding: query heads, MLP width and vocabulary are split over
the ``tp`` GPUs, KV heads too while there are at least ``tp`` of them, else each GPU keeps one (vLLM's
``max(1, num_key_value_heads // tp)``, the heads replicated).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace

from profattn.errors import ProfattnError
from profattn.workload.contract import DTYPE_BYTES, KV_DTYPE_BYTES, parse_dtype

__all__ = ["MODELS", "Gemm", "ModelConfig", "ModelError", "model_names", "parse_model_spec"]


class ModelError(ProfattnError, ValueError):
    """A ``--model`` name or field is unknown, missing or out of its domain (names the field); exit code 2."""


@dataclass(frozen=True)
class Gemm:
    """One weight matrix product of a step on one GPU: ``[M, k] @ [k, n]`` with ``M`` the step's rows (tokens, or
    sampled sequences for the logits), repeated ``per_step`` times (the layers)."""

    name: str
    k: int
    n: int
    per_step: int
    rows: str  # "tokens" (every new token of the step) or "sampled" (one row per sequence that samples)


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer as a serving step sees it (Llama/Qwen2/Mistral layout: RMSNorm, GQA attention,
    SwiGLU MLP with gate, up and down projections).

    Fields as the model's ``config.json`` names them (``num_layers`` = ``num_hidden_layers``, ``num_q_heads`` =
    ``num_attention_heads``); ``head_dim`` is ``hidden_size / num_attention_heads`` unless the config says otherwise;
    ``tensor_parallel``: GPUs one replica is split over; ``dtype``: weights and activations; ``source``: where the
    numbers come from.

    Raises:
        ModelError: a field that is missing, not a positive integer, or inconsistent (query heads not a multiple of
            KV heads, heads, MLP width or vocabulary not divisible by ``tensor_parallel``).
    """

    name: str
    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    tensor_parallel: int = 1
    dtype: str = "bfloat16"
    source: str = ""

    def __post_init__(self) -> None:
        for f in ("num_layers", "num_q_heads", "num_kv_heads", "head_dim", "hidden_size", "intermediate_size",
                  "vocab_size", "tensor_parallel"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ModelError(f"model {self.name}: {f} must be a positive integer, got {v!r}")
            if v > 1 << 24:
                raise ModelError(f"model {self.name}: {f} {v} is beyond any real model (at most {1 << 24})")
        try:
            object.__setattr__(self, "dtype", parse_dtype(self.dtype))
        except ProfattnError as exc:
            raise ModelError(f"model {self.name}: {exc}") from None
        if self.num_q_heads % self.num_kv_heads:
            raise ModelError(f"model {self.name}: num_q_heads {self.num_q_heads} is not a multiple of num_kv_heads "
                             f"{self.num_kv_heads}")
        tp = self.tensor_parallel
        for f in ("num_q_heads", "intermediate_size"):
            if getattr(self, f) % tp:
                raise ModelError(f"model {self.name}: {f} {getattr(self, f)} is not divisible by tp={tp}")
        if self.num_kv_heads >= tp and self.num_kv_heads % tp:
            raise ModelError(f"model {self.name}: num_kv_heads {self.num_kv_heads} is not divisible by tp={tp}")

    # ---- per GPU -----------------------------------------------------------------------------------
    @property
    def q_heads_per_gpu(self) -> int:
        """Query heads on one GPU: ``num_q_heads / tp``."""
        return self.num_q_heads // self.tensor_parallel

    @property
    def kv_heads_per_gpu(self) -> int:
        """KV heads on one GPU: ``max(1, num_kv_heads / tp)`` (vLLM replicates a KV head when tp exceeds them)."""
        return max(1, self.num_kv_heads // self.tensor_parallel)

    @property
    def group_size(self) -> int:
        """Query heads per KV head on one GPU (the GQA group a decode kernel loads each KV head for)."""
        return self.q_heads_per_gpu // self.kv_heads_per_gpu

    @property
    def itemsize(self) -> int:
        """Bytes per weight / activation element (:attr:`dtype`)."""
        return DTYPE_BYTES[self.dtype]

    def kv_bytes_per_token(self, kv_dtype: str | None = None) -> int:
        """KV-cache bytes one token occupies on one GPU, every layer: ``2 (K, V) · layers · Hkv_gpu · d · bytes``
        (``kv_dtype`` ``float8_e4m3fn``: one byte per element, the per-head scales not counted). Llama-3-8B in
        bf16: 2 · 32 · 8 · 128 · 2 = 131,072 bytes."""
        item = KV_DTYPE_BYTES[kv_dtype] if kv_dtype else self.itemsize
        return 2 * self.num_layers * self.kv_heads_per_gpu * self.head_dim * item

    def gemms(self) -> tuple[Gemm, ...]:
        """The weight products of one step on one GPU: per layer the fused Q/K/V projection
        (``hidden → (Hq_gpu + 2·Hkv_gpu)·d``), the output projection (``Hq_gpu·d → hidden``), the fused gate and up
        projections (``hidden → 2·intermediate/tp``) and the down projection (``intermediate/tp → hidden``); once per
        step the logits (``hidden → vocab/tp``, one row per sampled sequence, vLLM's ``LogitsProcessor`` computes
        logits only at the positions that sample)."""
        tp, d, h, layers = self.tensor_parallel, self.head_dim, self.hidden_size, self.num_layers
        qkv = (self.q_heads_per_gpu + 2 * self.kv_heads_per_gpu) * d
        return (
            Gemm("qkv_proj", h, qkv, layers, "tokens"),
            Gemm("o_proj", self.q_heads_per_gpu * d, h, layers, "tokens"),
            Gemm("gate_up_proj", h, 2 * self.intermediate_size // tp, layers, "tokens"),
            Gemm("down_proj", self.intermediate_size // tp, h, layers, "tokens"),
            Gemm("lm_head", h, -(-self.vocab_size // tp), 1, "sampled"),
        )

    @property
    def params_per_gpu(self) -> int:
        """Weights on one GPU: the :meth:`gemms` matrices, the embedding (vocabulary-parallel: ``vocab/tp · hidden``;
        shared with the logits when tied), the Q/K/V bias and the RMSNorm weights."""
        w = sum(g.k * g.n * g.per_step for g in self.gemms())
        embed = -(-self.vocab_size // self.tensor_parallel) * self.hidden_size
        if not self.tie_word_embeddings:
            w += embed
        bias = (self.q_heads_per_gpu + 2 * self.kv_heads_per_gpu) * self.head_dim * self.num_layers if self.qkv_bias else 0
        norms = (2 * self.num_layers + 1) * self.hidden_size
        return w + bias + norms

    @property
    def num_params(self) -> int:
        """Parameters of the whole model (the tp = 1 count; Llama-3-8B: 8,030,261,248)."""
        return replace(self, tensor_parallel=1).params_per_gpu

    @property
    def weight_bytes_per_gpu(self) -> int:
        """Bytes of :attr:`params_per_gpu` in :attr:`dtype`."""
        return self.params_per_gpu * self.itemsize

    @property
    def label(self) -> str:
        """``llama-3-70b tp=8`` (the name, with the tensor-parallel size when above 1)."""
        return self.name if self.tensor_parallel == 1 else f"{self.name} tp={self.tensor_parallel}"


#: Named configurations: the fields of each model's published ``config.json`` on the Hugging Face Hub.
MODELS: dict[str, ModelConfig] = {
    m.name: m for m in (
        ModelConfig("llama-3-8b", num_layers=32, num_q_heads=32, num_kv_heads=8, head_dim=128, hidden_size=4096,
                    intermediate_size=14336, vocab_size=128256,
                    source="meta-llama/Meta-Llama-3-8B config.json"),
        ModelConfig("llama-3.1-8b", num_layers=32, num_q_heads=32, num_kv_heads=8, head_dim=128, hidden_size=4096,
                    intermediate_size=14336, vocab_size=128256,
                    source="meta-llama/Llama-3.1-8B config.json"),
        ModelConfig("llama-3-70b", num_layers=80, num_q_heads=64, num_kv_heads=8, head_dim=128, hidden_size=8192,
                    intermediate_size=28672, vocab_size=128256,
                    source="meta-llama/Meta-Llama-3-70B config.json"),
        ModelConfig("qwen2.5-7b", num_layers=28, num_q_heads=28, num_kv_heads=4, head_dim=128, hidden_size=3584,
                    intermediate_size=18944, vocab_size=152064, qkv_bias=True,
                    source="Qwen/Qwen2.5-7B config.json"),
        ModelConfig("qwen2.5-72b", num_layers=80, num_q_heads=64, num_kv_heads=8, head_dim=128, hidden_size=8192,
                    intermediate_size=29568, vocab_size=152064, qkv_bias=True,
                    source="Qwen/Qwen2.5-72B config.json"),
        ModelConfig("mistral-7b", num_layers=32, num_q_heads=32, num_kv_heads=8, head_dim=128, hidden_size=4096,
                    intermediate_size=14336, vocab_size=32000,
                    source="mistralai/Mistral-7B-v0.1 config.json"),
    )
}

#: ``--model`` field names and their short forms.
_FIELD_ALIASES = {"layers": "num_layers", "hq": "num_q_heads", "hkv": "num_kv_heads", "d": "head_dim",
                  "hidden": "hidden_size", "intermediate": "intermediate_size", "vocab": "vocab_size",
                  "tp": "tensor_parallel", "tied": "tie_word_embeddings", "bias": "qkv_bias"}
_INT = ("num_layers", "num_q_heads", "num_kv_heads", "head_dim", "hidden_size", "intermediate_size", "vocab_size",
        "tensor_parallel")
_BOOL = ("tie_word_embeddings", "qkv_bias")
_REQUIRED = ("num_layers", "num_q_heads", "num_kv_heads", "hidden_size", "intermediate_size", "vocab_size")


def model_names() -> tuple[str, ...]:
    """The named configurations (:data:`MODELS`)."""
    return tuple(MODELS)


def parse_model_spec(text: str) -> ModelConfig:
    """A :class:`ModelConfig` from ``--model`` text: ``NAME[,field=value...]`` or ``field=value,...`` with every
    field (``layers``, ``hq``, ``hkv``, ``hidden``, ``intermediate``, ``vocab``; ``d`` defaults to hidden / hq;
    ``tp``, ``dtype``, ``tied``, ``bias``, ``name`` optional). Field names are the dataclass's or the short forms.

    Raises:
        ModelError: an unknown name or field, a field given twice, a value of the wrong type, a missing field (a
            model without heads: ``num_q_heads (hq) is missing``), or any :class:`ModelConfig` check.
    """
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise ModelError("--model is empty; give a name (" + ", ".join(MODELS) + ") or its fields")
    base: ModelConfig | None = None
    if "=" not in parts[0]:
        name = parts.pop(0).lower()
        if name not in MODELS:
            raise ModelError(f"unknown model {name!r}; named: {', '.join(MODELS)} (or give its fields: "
                             "layers=,hq=,hkv=,hidden=,intermediate=,vocab=)")
        base = MODELS[name]
    values: dict[str, object] = {}
    valid = {f.name for f in fields(ModelConfig)} - {"source"}
    for part in parts:
        key, eq, raw = (s.strip() for s in part.partition("="))
        if not eq or not raw:
            raise ModelError(f"--model {text!r}: {part!r} is not field=value")
        field = _FIELD_ALIASES.get(key, key)
        if field not in valid:
            raise ModelError(f"--model: unknown field {key!r}; valid: {', '.join(sorted(valid))} "
                             f"(short: {', '.join(_FIELD_ALIASES)})")
        if field in values:
            raise ModelError(f"--model: {field} given twice")
        if field in _INT:
            if not re.fullmatch(r"[0-9]+", raw):
                raise ModelError(f"--model: {key} must be a positive integer, got {raw!r}")
            values[field] = int(raw)
        elif field in _BOOL:
            flag = {"true": True, "1": True, "false": False, "0": False}.get(raw.lower())
            if flag is None:
                raise ModelError(f"--model: {key} must be true or false, got {raw!r}")
            values[field] = flag
        else:
            values[field] = raw
    if base is not None:
        if values and set(values) - {"tensor_parallel", "dtype"}:
            values.setdefault("name", f"{base.name}*")  # a changed shape is no longer the published model
        return replace(base, **values)  # type: ignore[arg-type]
    missing = [f for f in _REQUIRED if f not in values]
    if missing:
        short = {v: k for k, v in _FIELD_ALIASES.items()}
        raise ModelError("--model: " + ", ".join(f"{f} ({short[f]})" for f in missing)
                         + (" is" if len(missing) == 1 else " are") + " missing")
    if "head_dim" not in values:
        hq, hidden = values["num_q_heads"], values["hidden_size"]
        if hidden % hq:  # type: ignore[operator]
            raise ModelError(f"--model: hidden {hidden} is not a multiple of hq {hq}; give d=")
        values["head_dim"] = hidden // hq  # type: ignore[operator]
    values.setdefault("name", "custom")
    values.setdefault("source", "given as fields")
    return ModelConfig(**values)  # type: ignore[arg-type]
