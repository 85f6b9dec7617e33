"""A replay's loss is computed when it is read, and holds exactly the eager value whenever it is read."""
import numpy as np

import needle as ndl
import needle.nn as nn
from needle.compiler.deferred_results import PendingResult

from steps import data, model_and_optimizer, state_arrays, step_function

STEPS = 12


def batches(batch_size=32):
    images, labels = data()
    return [
        (ndl.Tensor(images[i : i + batch_size]), ndl.Tensor(labels[i : i + batch_size]))
        for i in range(0, batch_size * 4, batch_size)
    ]


def eager_losses_and_state(optimizer="sgd"):
    model, opt = model_and_optimizer(optimizer)
    step = step_function(model, opt)
    np.random.seed(1)
    losses = [step(x, y).numpy().copy() for x, y in batches() * (STEPS // 4)]
    return losses, state_arrays(model, opt)


def test_the_replayed_loss_is_pending_until_read():
    model, opt = model_and_optimizer()
    step = ndl.compile(step_function(model, opt))
    (x, y), (x2, y2) = batches()[:2]
    step(x, y)
    loss = step(x2, y2)
    plan = next(iter(step._plans.values())).plan
    assert plan.deferred_runs and isinstance(loss, PendingResult) and loss.is_pending()
    assert loss.op is None and not loss.inputs and not loss.requires_grad
    value = loss.numpy()
    assert not loss.is_pending() and value.shape == ()


def test_losses_read_now_later_or_never_are_bitwise_eager():
    """Read at once, read after later replays (each holds its own step's value), or never read."""
    for optimizer in ("sgd", "adam"):
        expected, expected_state = eager_losses_and_state(optimizer)
        model, opt = model_and_optimizer(optimizer)
        step = ndl.compile(step_function(model, opt))
        np.random.seed(1)
        kept = {}
        for index, (x, y) in enumerate(batches() * (STEPS // 4)):
            loss = step(x, y)
            if index % 3 == 0:
                assert loss.numpy().tobytes() == expected[index].tobytes(), (optimizer, index)
            elif index % 3 == 1:
                kept[index] = loss  # read at the end, after later replays
        for index, loss in kept.items():
            assert loss.numpy().tobytes() == expected[index].tobytes(), (optimizer, index)
        state = state_arrays(model, opt)
        assert all(expected_state[name].tobytes() == state[name].tobytes() for name in expected_state)


def test_float_item_and_printing_read_the_pending_value():
    model, opt = model_and_optimizer()
    step = ndl.compile(step_function(model, opt))
    (x, y), (x2, y2) = batches()[:2]
    step(x, y)
    first, second, third = step(x2, y2), step(x2, y2), step(x2, y2)
    assert isinstance(float(first), float)
    assert second.item() == float(np.asarray(second.numpy()))
    assert str(third.numpy()) in repr(third)


def test_a_constant_the_caller_changes_after_the_call_does_not_change_the_loss():
    """The loss reads an array the caller holds, so it must be the value at the call: not deferred."""

    def run(compiled):
        np.random.seed(0)
        model = nn.Linear(4, 3)
        opt = ndl.optim.SGD(model.parameters(), lr=0.1)
        constant = ndl.Tensor(np.ones(3, np.float32), requires_grad=False)

        def step(x):
            opt.reset_grad()
            out = model(x)
            (out * out).sum().backward()  # the gradient needs out: only the last two ops are the loss's
            opt.step()
            return (out * constant).sum()

        step = ndl.compile(step) if compiled else step
        x = ndl.Tensor(np.ones((2, 4), np.float32))
        step(x)
        loss = step(x)
        constant.cached_data.raw[...] = 100.0  # the caller changes its array after the call
        return loss

    eager, compiled = run(False), run(True)
    assert not isinstance(compiled, PendingResult)
    assert compiled.numpy().tobytes() == eager.numpy().tobytes()


def test_results_the_state_needs_are_not_deferred():
    """A step returning its logits (which the gradient needs) gives them at once."""
    model, opt = model_and_optimizer()
    loss_fn = nn.SoftmaxLoss()

    @ndl.compile
    def step(x, y):
        opt.reset_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        opt.step()
        return logits, loss

    (x, y), (x2, y2) = batches()[:2]
    step(x, y)
    logits, loss = step(x2, y2)
    assert not isinstance(logits, PendingResult) and isinstance(loss, PendingResult)
