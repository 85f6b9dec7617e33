"""The global names and closure variables a compiled function reads: rebinding one is noticed.

A notebook user runs a cell again (``model = nn.Sequential(...)``) and calls the compiled step
defined in another cell: eager code would train the new model, and so must a replay. Each test
runs its step in a namespace of its own, as a notebook's globals.
"""
import textwrap

import numpy as np
import pytest

import needle as ndl
import needle.nn as nn
from needle.compiler.compiled import NUMPY_MAJOR
from needle.compiler.sources import Sources
from steps import data

pytestmark = pytest.mark.skipif(NUMPY_MAJOR < 2, reason="ndl.compile needs numpy 2")

NOTEBOOK = textwrap.dedent(
    """
    def step(x, y):
        opt.reset_grad()
        loss = loss_fn(model(x), y) * scale
        loss.backward()
        opt.step()
        return loss
    """
)


def notebook(seed, scale=1.0):
    """A namespace holding a model, its optimizer and the step, as a notebook's cells make them."""
    namespace = {"loss_fn": nn.SoftmaxLoss(), "scale": scale}
    exec(NOTEBOOK, namespace)
    new_model(namespace, seed)
    return namespace


def new_model(namespace, seed):
    """The cell that makes the model and its optimizer, run (again)."""
    np.random.seed(seed)
    namespace["model"] = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 4))
    namespace["opt"] = ndl.optim.SGD(namespace["model"].parameters(), lr=0.1, momentum=0.9)


def batches(count, start=0):
    images, labels = data()
    rows = [slice((i % 9) * 16, (i % 9 + 1) * 16) for i in range(start, start + count)]  # full batches of 16
    return [(ndl.Tensor(images[r]), ndl.Tensor(labels[r])) for r in rows]


def weights(model):
    return [p.numpy().copy() for p in model.parameters()]


def run(compiled, changes):
    """Four steps, then each change to the namespace followed by three steps: every loss and the
    final weights of every model the namespace held."""
    namespace = notebook(0)
    step = ndl.compile(namespace["step"]) if compiled else namespace["step"]
    models, losses = [namespace["model"]], [step(x, y).numpy() for x, y in batches(4)]
    for index, change in enumerate(changes):
        change(namespace)
        models.append(namespace["model"])
        losses += [step(x, y).numpy() for x, y in batches(3, start=4 + 3 * index)]
    return losses, [weights(model) for model in models], step


CHANGES = {
    "the model cell run again": [lambda ns: new_model(ns, 1)],
    "a global number changed": [lambda ns: ns.update(scale=0.5)],
    "the old model bound again": [
        lambda ns: ns.update(saved=(ns["model"], ns["opt"])) or new_model(ns, 1),
        lambda ns: ns.update(model=ns["saved"][0], opt=ns["saved"][1]),
    ],
}


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_a_rebound_global_is_what_the_replay_uses(name):
    eager_losses, eager_weights, _ = run(False, CHANGES[name])
    losses, trained, step = run(True, CHANGES[name])
    assert all(np.array_equal(a, b) for a, b in zip(eager_losses, losses))
    for eager_model, model in zip(eager_weights, trained):
        assert all(np.array_equal(a, b) for a, b in zip(eager_model, model))
    expected = {"the model cell run again": 2, "a global number changed": 2, "the old model bound again": 2}
    assert step.captures == expected[name], "the old model's plan is found again, not captured anew"


def test_a_number_assigned_again_with_the_same_value_keeps_the_plan():
    namespace = notebook(0)
    step = ndl.compile(namespace["step"])
    for x, y in batches(3):
        namespace["scale"] = float("1.0")  # another float object, equal
        step(x, y)
    assert step.captures == 1 and step.replays == 2


def test_a_closure_variable_rebound_is_noticed():
    def make():
        factor = ndl.Tensor(np.ones((12, 4), np.float32))

        def forward(x):
            return x @ factor  # (a constant: no graph to keep)

        def rebind(value):
            nonlocal factor
            factor = value

        return forward, rebind

    forward, rebind = make()
    compiled = ndl.compile(forward)
    x = batches(1)[0][0]
    compiled(x), compiled(x)
    rebind(ndl.Tensor(np.full((12, 4), 2.0, np.float32)))
    assert np.array_equal(compiled(x).numpy(), forward(x).numpy())
    assert compiled.captures == 2


def test_only_names_loaded_as_globals_count():
    namespace = {"lr": 0.1, "shape": None}
    exec("def f(opt, x):\n    opt.lr = 2\n    return [x.shape for _ in range(1)] + [lr]", namespace)
    assert Sources.of(namespace["f"]).names == ("lr",)  # not shape, an attribute; range is a builtin


def test_a_global_counter_the_step_increments_is_named_by_the_recapture_warning():
    namespace = {"ndl": ndl, "calls": 0, "weight": ndl.Tensor(np.ones((12, 4), np.float32))}
    exec("def forward(x):\n    global calls\n    calls += 1\n    return x @ weight", namespace)
    compiled = ndl.compile(namespace["forward"])
    x = batches(1)[0][0]
    with pytest.warns(ndl.RecaptureWarning, match=r"sets calls \(to 9\)"):
        for _ in range(10):
            compiled(x)
    assert namespace["calls"] == 10 and compiled.captures == 10
