"""Two models trained in two threads at once end bitwise where each ends trained alone.

An optimizer's scratch memory is its own (``fused.Scratch``); when it was one buffer per device
and dtype, two threads overwrote each other's half-finished updates (SGD off by 0.035, Adam NaN).
"""
import sys
import threading

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim

STEPS = 40


def train(make_optimizer, seed, start=None):
    """A small MLP's parameters after STEPS steps on data drawn from ``seed``, as numpy arrays."""
    rng = np.random.default_rng(seed)
    model = nn.Sequential(nn.Linear(32, 96), nn.ReLU(), nn.Linear(96, 96), nn.ReLU(), nn.Linear(96, 5))
    for param in model.parameters():  # weights from this seed, not from numpy's global state
        param.data = ndl.Tensor(rng.standard_normal(param.shape).astype(np.float32) * 0.1)
    x = ndl.Tensor(rng.standard_normal((64, 32)).astype(np.float32), requires_grad=False)
    y = ndl.Tensor(rng.integers(0, 5, 64).astype(np.int64), dtype="int64", requires_grad=False)
    opt = make_optimizer(model.parameters())
    if start is not None:
        start.wait()
    for _ in range(STEPS):
        opt.reset_grad()
        nn.SoftmaxLoss()(model(x), y).backward(create_graph=False)
        opt.step()
    return [p.numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize(
    "make_optimizer",
    [
        lambda params: optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01),
        lambda params: optim.Adam(params, lr=0.01, weight_decay=0.01),
    ],
    ids=["sgd-momentum", "adam"],
)
def test_two_threads_train_two_models_as_if_alone(make_optimizer):
    sequential = [train(make_optimizer, seed) for seed in (1, 2)]
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as Python allows
    try:
        results, errors = {}, []
        start = threading.Barrier(2)

        def run(seed):
            try:
                results[seed] = train(make_optimizer, seed, start)
            except BaseException as error:  # reported by the main thread
                errors.append(error)

        threads = [threading.Thread(target=run, args=(seed,)) for seed in (1, 2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(previous)
    assert not errors, errors
    for seed, alone in zip((1, 2), sequential):
        for got, want in zip(results[seed], alone):
            np.testing.assert_array_equal(got, want)
