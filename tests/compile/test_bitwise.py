"""Compiled steps give exactly the eager values: losses, parameters, optimizer state, running stats."""
import numpy as np
import pytest

import needle as ndl

from steps import model_and_optimizer, state_arrays, step_function, train

STEPS = 50


def run(optimizer, compiled, **options):
    model, opt = model_and_optimizer(optimizer)
    step = step_function(model, opt)
    if compiled:
        step = ndl.compile(step)
    losses = train(step, opt, STEPS, **options)
    return losses, state_arrays(model, opt), step


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_fifty_steps_bitwise_equal_with_partial_batches_and_an_lr_change(optimizer):
    lr_change = (20, 0.03)
    eager_losses, eager_state, _ = run(optimizer, False, lr_change=lr_change)
    losses, state, step = run(optimizer, True, lr_change=lr_change)
    assert step.captures == 2  # full batches, and the partial last batch of each pass
    assert step.replays == STEPS - 2
    assert len(losses) == STEPS
    for index, (expected, got) in enumerate(zip(eager_losses, losses)):
        assert expected.tobytes() == got.tobytes(), f"loss of step {index}: {expected} != {got}"
    assert sorted(state) == sorted(eager_state)
    assert any(name.endswith("running_mean") for name in state)
    for name, expected in eager_state.items():
        assert expected.tobytes() == state[name].tobytes(), name


def test_the_lr_change_matters():
    """The test above would pass if lr were ignored only if lr did not change the result."""
    unchanged, _, _ = run("sgd", True)
    changed, _, _ = run("sgd", True, lr_change=(20, 0.03))
    assert unchanged[:21] == changed[:21] or all(a.tobytes() == b.tobytes() for a, b in zip(unchanged[:21], changed[:21]))
    assert any(a.tobytes() != b.tobytes() for a, b in zip(unchanged[21:], changed[21:]))


def test_dropout_draws_a_fresh_mask_every_replay():
    model, opt = model_and_optimizer()
    opt.lr = 0.0  # the weights stay, so only the mask changes the loss
    opt.weight_decay = 0.0
    step = ndl.compile(step_function(model, opt))
    model.modules[1].momentum = 0.0  # the running stats stay too
    losses = train(step, opt, 4, batch_size=30)
    assert step.replays == 3
    assert len({loss.tobytes() for loss in losses}) > 1
