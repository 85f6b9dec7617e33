"""Every layer and loss of ``needle.nn`` in a compiled step, replayed bitwise as eager, with a
smaller batch (a second plan) and an evaluation-mode call (a third) along the way."""
import numpy as np
import pytest

import needle as ndl
import needle.nn as nn

from steps import step_function

BLOCKS = {
    "BatchNorm1d": lambda: nn.BatchNorm1d(12),
    "LayerNorm1d": lambda: nn.LayerNorm1d(12),
    "Dropout": lambda: nn.Dropout(0.3),
    "Identity": nn.Identity,
    "ReLU": nn.ReLU,
    "Sigmoid": nn.Sigmoid,
    "Tanh": nn.Tanh,
    "Residual": lambda: nn.Residual(nn.Sequential(nn.Linear(12, 12), nn.ReLU())),
}
LOSSES = {"SoftmaxLoss": nn.SoftmaxLoss, "CrossEntropyLoss": nn.CrossEntropyLoss}


def train(block, loss, optimizer, compiled):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(10, 12), BLOCKS[block](), nn.Linear(12, 4))
    if optimizer == "adam":
        opt = ndl.optim.Adam(model.parameters(), lr=0.01, weight_decay=1e-3)
    else:
        opt = ndl.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = step_function(model, opt, LOSSES[loss]())
    step = ndl.compile(step) if compiled else step
    rng = np.random.default_rng(1)
    np.random.seed(3)
    results = []
    for index in range(8):
        batch = 5 if index == 5 else 6
        model.train(index != 6)
        x = ndl.Tensor(rng.standard_normal((batch, 10)).astype(np.float32))
        y = ndl.Tensor(rng.integers(0, 4, batch), dtype="int64")
        results.append(step(x, y).numpy().copy())
    return results + [p.numpy().copy() for p in model.parameters()], step


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("loss", sorted(LOSSES))
@pytest.mark.parametrize("block", sorted(BLOCKS))
def test_the_layer_replays_bitwise(block, loss, optimizer):
    expected, _ = train(block, loss, optimizer, compiled=False)
    got, compiled = train(block, loss, optimizer, compiled=True)
    assert compiled.captures == 3 and compiled.replays == 5
    assert [a.tobytes() for a in expected] == [a.tobytes() for a in got]
