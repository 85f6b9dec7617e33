"""A reported finding keeps no graph alive: it holds text, counts, lines and the drawn chain."""
import gc
import warnings

import numpy as np

import needle as ndl
from needle import nn, optim
from trainers import GraphLeakWarning, MemoryMonitor


def leaky_cell(monitor, steps=30):
    """A notebook cell that keeps every loss; returns the list the user still holds."""
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 3))
    opt = optim.SGD(model.parameters(), lr=0.05)
    X = ndl.Tensor(np.random.randn(64, 4).astype(np.float32), requires_grad=False)
    y = ndl.Tensor(np.zeros(64, dtype=np.float32), requires_grad=False)
    losses = []
    for _ in range(steps):
        opt.reset_grad()
        loss = nn.SoftmaxLoss()(model(X), y)
        loss.backward()
        opt.step()
        losses.append(loss)
        monitor.step()
    return losses


def test_live_nodes_return_to_the_baseline_once_the_users_reference_is_gone(capsys):
    gc.collect()
    baseline = ndl.autograd.snapshot().live_nodes
    monitor = MemoryMonitor()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses = leaky_cell(monitor)
    assert any(issubclass(w.category, GraphLeakWarning) for w in caught)
    assert monitor.last_finding.retained_nodes  # the user's list still holds the graphs
    del losses
    gc.collect()
    assert ndl.autograd.snapshot().live_nodes == baseline
    assert monitor.last_finding.retained_nodes == ()
    explanation = monitor.explain()  # from what the finding drew when it was reported
    text = str(explanation)
    assert "SoftmaxCrossEntropy" in text and "losses" in text
    assert "SoftmaxCrossEntropy" in explanation._repr_html_()  # a notebook shows the same chain
    monitor.clear_finding()
    assert monitor.last_finding is None
