"""Benchmark the refusal of hostile spec files and trace lines (issue: YAML bombs, nesting).

For each input it prints the time to an answer (best of `--repeats`) and the peak memory
Python allocated meanwhile (tracemalloc), for:

- the guarded reader every spec-file path calls (`rollmux_web.jobs.spec_yaml.load_spec_text`:
  the upload page and the CLI): the 9-level "billion laughs" (9^9 items once expanded), a
  spec nested 10,000 deep, a 1 MB flow list, and a valid spec for scale;
- the same reader without libyaml (its pure-Python fallback) on the bomb and the nesting;
- the trace parser on a what-if line of 100,000 `[` (`scheduler.trace.parse_trace_text`);
- the baseline, what the server did before in the same run: `yaml.safe_load` then turning
  the document into text (what the field validation did with it), on the 5- and 6-level
  bombs (9^5 and 9^6 items; the 9-level one took 203 s and ~2.7 GB, so it is not run).

    .venv/bin/python bench/spec_input.py [--repeats 5]

Target: every refusal under 100 ms with memory bounded (a few MB whatever the expansion).
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402  (after the path)

from rollmux_web.jobs.spec_yaml import LOADER, _PureLoader, load_spec_text  # noqa: E402
from scheduler.trace import TraceError, parse_trace_text  # noqa: E402


def laughs(levels: int) -> str:
    """Return the `levels`-level billion-laughs document (9^levels strings expanded)."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        name, prev = chr(97 + i), chr(96 + i)
        lines.append(f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]")
    return "\n".join(lines) + "\n"


VALID = (
    "name: grpo-7b\nslo_class: silver\niterations: 20\nrollout_gpus: 8\ntrain_gpus: 8\n"
    "t_roll_max_s: 300\nt_train_max_s: 120\nhost_mem_gb: 400\n"
)


def measure(fn: Callable[[], Any], repeats: int) -> tuple[float, float, str]:
    """Return (best seconds, peak MB of the first run, outcome) of calling `fn`."""
    best, peak_mb, outcome = float("inf"), 0.0, ""
    for i in range(repeats):
        if i == 0:
            tracemalloc.start()
        t0 = time.perf_counter()
        try:
            fn()
            outcome = "read"
        except (yaml.YAMLError, TraceError) as exc:
            outcome = "refused: " + str(getattr(exc, "problem", None) or exc)[:60]
        elapsed = time.perf_counter() - t0
        if i == 0:
            peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
        else:
            best = min(best, elapsed)
    return (best if repeats > 1 else elapsed), peak_mb, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    repeats = max(2, args.repeats)

    def old_path(text: str) -> Callable[[], Any]:
        return lambda: str(yaml.safe_load(text))

    cases: list[tuple[str, int, Callable[[], Any]]] = [
        ("baseline: safe_load + str, 5-level bomb", len(laughs(5)), old_path(laughs(5))),
        ("baseline: safe_load + str, 6-level bomb", len(laughs(6)), old_path(laughs(6))),
    ]
    guarded = {
        "guarded: 9-level billion laughs": laughs(9),
        "guarded: 6-level bomb": laughs(6),
        "guarded: nested 10,000 deep": "name: x\nmodel: " + "[" * 10_000 + "]" * 10_000,
        "guarded: 1 MB flow list": "[" + ",".join(["1"] * 500_000) + "]",
        "guarded: a valid spec": VALID,
    }
    for label, text in guarded.items():
        cases.append((label, len(text), lambda text=text: load_spec_text(text)))
    for label in ("guarded: 9-level billion laughs", "guarded: nested 10,000 deep"):
        text = guarded[label]
        cases.append(
            (
                label.replace("guarded", "pure-Python fallback"),
                len(text),
                lambda text=text: load_spec_text(text, loader=_PureLoader),
            )
        )
    deep_line = "[" * 100_000
    cases.append(
        ("trace: a line of 100,000 [", len(deep_line), lambda: parse_trace_text(deep_line))
    )

    print(f"reader: {LOADER.__name__} (PyYAML {yaml.__version__})")
    print(f"{'input':44} {'bytes':>9} {'best ms':>9} {'peak MB':>8}  outcome")
    results = {}
    for label, size, fn in cases:
        secs, peak, outcome = measure(fn, repeats)
        results[label] = secs
        print(f"{label:44} {size:9,} {secs * 1000:9.1f} {peak:8.2f}  {outcome}")
    ratio = results["baseline: safe_load + str, 6-level bomb"] / results["guarded: 6-level bomb"]
    print(f"\n6-level bomb: the guarded reader answers {ratio:,.0f}x sooner than the old path")
    worst = max(v for k, v in results.items() if k.startswith(("guarded", "trace")))
    print(f"slowest refusal or read: {worst * 1000:.1f} ms (target < 100 ms)")


if __name__ == "__main__":
    main()
