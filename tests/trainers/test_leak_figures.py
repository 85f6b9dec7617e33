"""The leak warning's figures are the memory's growth: its MB figure and "each iteration keeps"."""
import re
import warnings

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim
from trainers import GraphLeakWarning, MemoryMonitor

UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def nbytes(text):
    number, unit = text.split()
    return float(number) * UNITS[unit]


def leaky_loop(keep, backward_kwargs, iterations=30):
    """A loop that keeps every iteration's graph (``keep``: a sum or a list), with a CNN-like reshape
    view and a LSTM's saved activations in it; returns (warnings, monitor)."""
    rng = np.random.default_rng(0)
    lstm, head = nn.LSTM(8, 32), nn.Linear(32, 4)
    opt, loss_fn = optim.SGD(lstm.parameters() + head.parameters(), lr=0.01), nn.SoftmaxLoss()
    monitor = MemoryMonitor()
    total, kept = 0.0, []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(iterations):
            x = ndl.Tensor(rng.standard_normal((6, 16, 8)).astype("float32"), requires_grad=False)
            y = ndl.Tensor(rng.integers(0, 4, size=6 * 16), dtype="int64", requires_grad=False)
            output, _ = lstm(x)
            loss = loss_fn(head(output.reshape((6 * 16, 32))), y)
            opt.reset_grad()
            loss.backward(**backward_kwargs)
            opt.step()
            if keep == "sum":
                total += loss
            else:
                kept.append(loss)
            monitor.step()
    monitor.close()
    return [w for w in caught if issubclass(w.category, GraphLeakWarning)], monitor


@pytest.mark.parametrize("keep", ["sum", "list"])
@pytest.mark.parametrize("backward_kwargs", [{}, {"create_graph": False}], ids=["backward()", "create_graph=False"])
def test_both_figures_are_the_live_bytes_growth_per_iteration(keep, backward_kwargs):
    leaks, monitor = leaky_loop(keep, backward_kwargs)
    assert leaks, "the leak was not warned"
    message = str(leaks[0].message)
    history = list(monitor.history)
    growth = (history[-1].live_bytes - history[5].live_bytes) / (len(history) - 1 - 5)
    warned = nbytes(re.search(r"graph nodes \(([\d.]+ [KMG]?B)\)", message).group(1))
    summary = next(line for line in message.splitlines() if "each iteration keeps:" in line)
    kept = nbytes(re.search(r"nodes, ([\d.]+ [KMG]?B)", summary).group(1))
    assert warned == pytest.approx(growth, rel=0.1)
    assert kept == pytest.approx(growth, rel=0.1), summary


@pytest.mark.parametrize("keep", ["sum", "list"])
@pytest.mark.parametrize("backward_kwargs", [{}, {"create_graph": False}], ids=["backward()", "create_graph=False"])
def test_explain_sizes_the_retained_graph_from_its_own_buffers(keep, backward_kwargs, capsys):
    # Without the warning's measured growth, explain() counts the buffers only that iteration's
    # graph and its gradients hold, each once: the same figure for a loop that makes fresh batches.
    _, monitor = leaky_loop(keep, backward_kwargs)
    history = list(monitor.history)
    growth = (history[-1].live_bytes - history[5].live_bytes) / (len(history) - 1 - 5)
    text = str(monitor.explain())  # an Explanation: displays once, str() is its text
    summary = next(line for line in text.splitlines() if "each iteration keeps:" in line)
    assert nbytes(re.search(r"nodes, ([\d.]+ [KMG]?B)", summary).group(1)) == pytest.approx(growth, rel=0.1), summary
