"""The size an hf-grpo job's model name asks for (scheduler.model_shape): QA pass 12 found
"llama-7B" and "qwen2.5-0.5B" accepted and built as the ~0.1M default, as the name's size
was read in millions only."""

from __future__ import annotations

import pytest

from scheduler.model_shape import (
    DEFAULT_PARAMETERS,
    asked_parameters,
    host_mem_refusal,
    llama_shape,
)


@pytest.mark.parametrize(
    ("model", "parameters"),
    [
        ("llama-25M", 25e6),
        ("llama-0.1m", 0.1e6),
        ("qwen2.5-0.5B", 0.5e9),
        ("llama-7b", 7e9),
        ("qwen2.5-14b-8k", 14e9),  # a context length is no size
        ("llama", DEFAULT_PARAMETERS),
        ("", DEFAULT_PARAMETERS),
    ],
)
def test_a_model_name_asks_for_its_size_in_millions_or_billions(
    model: str, parameters: float
) -> None:
    assert asked_parameters(model) == pytest.approx(parameters)


def test_a_size_in_billions_past_the_runners_limit_is_refused_naming_the_model() -> None:
    why = host_mem_refusal("llama-7B", 1_000_000.0)
    assert why is not None and why.startswith("model: 'llama-7B' asks for more than 1,000M")


def test_a_size_in_billions_within_it_builds_that_size() -> None:
    shape = llama_shape("llama-0.5B")
    assert 0.4e9 <= shape.parameters <= 0.6e9
    assert llama_shape("llama-0.5B") == llama_shape("llama-500M")
