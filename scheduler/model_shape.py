"""The shape of the config-built Llama model an `hf-grpo` job names, and what it holds.

The `hf-grpo` runner (workers/runners/hf_grpo.py) builds a Llama-style causal LM from its
job's `model` name ("llama-0.1M", "llama-25M", "llama-0.5B"; no size: the ~0.1M default); submission
checks that the job's `host_mem_gb` holds its resident state. Both read the shape here, so
the check and the runner agree. Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

VOCAB = 15  # PAD, BOS, EOS and "0123456789+=" (the runner's tokenizer)
DEFAULT_PARAMETERS = 0.1e6
MAX_PARAMETERS = 1e9  # a CPU-runnable runner: more is a unit mistake
# a size in millions or billions ("25M", "0.5B", "7b"); a context length ("8k") is none
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([mMbB])(?![a-zA-Z])")
_UNIT = {"m": 1e6, "b": 1e9}
_HIDDEN = (64, 128, 256, 384, 512, 768, 1024)


@dataclass(frozen=True)
class LlamaShape:
    """A Llama config's sizes (heads of 32 dimensions, MLP twice the hidden size)."""

    hidden: int
    layers: int

    @property
    def heads(self) -> int:
        return max(1, self.hidden // 32)

    @property
    def intermediate(self) -> int:
        return 2 * self.hidden

    @property
    def parameters(self) -> int:
        """Return the parameter count (untied embeddings and head, RMS norms included)."""
        h, i = self.hidden, self.intermediate
        per_layer = 4 * h * h + 3 * h * i + 2 * h
        return 2 * VOCAB * h + self.layers * per_layer + h

    @property
    def state_bytes(self) -> int:
        """Return the fp32 bytes one trainer holds resident: weights, gradients and AdamW's
        two moments (16 B a parameter) and the reference policy (4 B)."""
        return 20 * self.parameters


def asked_parameters(model: str) -> float:
    """Return the parameter count a model name asks for ("llama-25M" -> 25e6,
    "qwen2.5-0.5B" -> 0.5e9; the last "<number>M" or "<number>B" wins), or the default when
    it states none. (A size in billions was read as none: "llama-7B" built the 0.1M
    default without a word; it now asks for 7e9 and is refused above MAX_PARAMETERS.)"""
    found = _SIZE.findall(model or "")
    if not found:
        return DEFAULT_PARAMETERS
    number, unit = found[-1]
    return float(number) * _UNIT[unit.lower()]


def llama_shape(model: str) -> LlamaShape:
    """Return the shape for a model name: the widest hidden size that still gives two
    layers or more, then as many layers as come closest to the asked size."""
    want = asked_parameters(model)
    hidden = _HIDDEN[0]
    for h in _HIDDEN:
        if want >= 2 * 10 * h * h:
            hidden = h
    return LlamaShape(hidden=hidden, layers=max(2, round(want / (10 * hidden * hidden))))


def host_mem_refusal(model: str, host_mem_gb: float) -> str | None:
    """Return why `host_mem_gb` cannot hold an hf-grpo job's resident state, or None."""
    if asked_parameters(model) > MAX_PARAMETERS:
        return (
            f"model: {model!r} asks for more than {MAX_PARAMETERS / 1e6:,.0f}M parameters,"
            " more than the hf-grpo runner builds"
        )
    shape = llama_shape(model)
    need_gb = shape.state_bytes / 2**30
    if need_gb > host_mem_gb:
        return (
            f"{host_mem_gb:g} GB cannot hold the hf-grpo state of model {model!r}"
            f" ({shape.parameters:,} parameters: {need_gb:.3g} GB of fp32 weights, gradients,"
            " AdamW moments and reference policy per worker); declare at least"
            f" {need_gb:.3g} GB or a smaller model"
        )
    return None
