"""Estimate a job's weight-sync seconds per iteration (`JobProfile.t_sync_s`).

After each training the new weights go from the trainers to the job's rollout
workers (paper section 1: "sync: network bound; weights are broadcast from the
trainers to the rollout workers"). The pools are separate clusters joined by a slow
link (the paper's testbed: 20 Gbps Ethernet between them, 400 Gbps InfiniBand inside
each), so the dispatcher sends ONE copy across and broadcasts it inside the rollout
pool. The estimate is that plan's transfer time:

    t_sync = bytes x 8 / cross_pool_bandwidth + (bytes x 8 / rollout_pool_bandwidth
             if the job has more than one rollout node) + fixed overhead

(a pipelined broadcast inside the pool costs about one copy's time whatever the node
count). It ignores latency and congestion; it is a planning estimate that the web
form offers as a default, and a job's measured sync phases replace it.
"""

from __future__ import annotations

import math
import re

__all__ = [
    "BYTES_PER_PARAMETER",
    "model_bytes",
    "parameters_from_model_name",
    "sync_seconds",
]

# Bytes per parameter of the weights sent, by dtype name.
BYTES_PER_PARAMETER = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0}
# The paper's testbed (paper-notes.md section 1).
PAPER_CROSS_POOL_GBPS = 20.0
PAPER_IN_POOL_GBPS = 400.0

_SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*([bm])\b", re.IGNORECASE)


def parameters_from_model_name(model: str) -> float | None:
    """Return the parameter count a model name states ("qwen2.5-7b" -> 7e9), or None.

    The last "<number>b" or "<number>m" token wins ("Qwen2.5-14B-Instruct" -> 14e9,
    "gpt2-124m" -> 124e6); a name without one (or with several numbers and no unit)
    gives None rather than a guess.
    """
    found = _SIZE.findall(model)
    if not found:
        return None
    number, unit = found[-1]
    return float(number) * (1e9 if unit.lower() == "b" else 1e6)


def model_bytes(parameters: float, *, dtype: str = "bf16") -> float:
    """Return the bytes of `parameters` weights in `dtype` (a key of BYTES_PER_PARAMETER)."""
    if not (math.isfinite(parameters) and parameters > 0):
        raise ValueError(f"parameters must be a finite number > 0, got {parameters!r}")
    if dtype not in BYTES_PER_PARAMETER:
        raise ValueError(f"dtype must be one of {', '.join(BYTES_PER_PARAMETER)}, got {dtype!r}")
    return parameters * BYTES_PER_PARAMETER[dtype]


def sync_seconds(
    weight_bytes: float,
    *,
    cross_pool_gbps: float = PAPER_CROSS_POOL_GBPS,
    in_pool_gbps: float = PAPER_IN_POOL_GBPS,
    rollout_nodes: int = 1,
    overhead_s: float = 0.0,
) -> float:
    """Return the estimated seconds to sync `weight_bytes` of weights to the rollout pool.

    One copy crosses the link between the pools at `cross_pool_gbps`; with more than
    one rollout node it is then broadcast inside the pool at `in_pool_gbps`.
    `overhead_s` adds a fixed cost (e.g. loading the weights into the engine).
    """
    for name, value in (("cross_pool_gbps", cross_pool_gbps), ("in_pool_gbps", in_pool_gbps)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    if not (math.isfinite(weight_bytes) and weight_bytes >= 0):
        raise ValueError(f"weight_bytes must be a finite number >= 0, got {weight_bytes!r}")
    if rollout_nodes < 1:
        raise ValueError(f"rollout_nodes must be >= 1, got {rollout_nodes}")
    if not (math.isfinite(overhead_s) and overhead_s >= 0):
        raise ValueError(f"overhead_s must be a finite number >= 0, got {overhead_s!r}")
    bits = weight_bytes * 8.0
    seconds = bits / (cross_pool_gbps * 1e9)
    if rollout_nodes > 1:
        seconds += bits / (in_pool_gbps * 1e9)
    return seconds + overhead_s
