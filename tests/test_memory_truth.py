"""live_bytes is the memory: for loops that leak every step, its growth equals tracemalloc's within 10%.

numpy reports every buffer it allocates to tracemalloc, so tracemalloc's growth is what the loop
really keeps: the arrays, and the Python objects of the graph (a small share, for these models).
The loops and models are those of benchmarks/memory_truth.py, which prints the same ratios.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "benchmarks")))

import memory_truth  # noqa: E402


@pytest.mark.parametrize("path", list(memory_truth.BACKWARD_PATHS))
@pytest.mark.parametrize("model", list(memory_truth.MODELS))
def test_live_bytes_growth_matches_tracemalloc(model, path):
    growth = memory_truth.measure(model, memory_truth.BACKWARD_PATHS[path], steps=3, warmup=1)
    assert growth["tracemalloc"] > 500_000, "the loop must leak enough for the ratio to mean something"
    ratio = growth["live_bytes"] / growth["tracemalloc"]
    assert 0.9 <= ratio <= 1.1, f"{model}, {path}: live_bytes grew {ratio:.2f}x what tracemalloc saw"


@pytest.mark.parametrize("model", ["MLP", "LSTM classifier", "Embedding + LSTM language model"])
def test_losses_kept_without_backward_are_counted_in_full(model):
    # The forward's saved arrays (the LSTM activations, the cross-entropy's exponentials) are
    # most of what such a loop keeps.
    growth = memory_truth.measure(model, {}, steps=3, warmup=1, call_backward=False)
    ratio = growth["live_bytes"] / growth["tracemalloc"]
    assert 0.9 <= ratio <= 1.1, f"{model} without backward: live_bytes grew {ratio:.2f}x what tracemalloc saw"
