"""The optimizer step inside a replay: hyper-parameter changes and loaded state take effect, bitwise."""
import copy

import numpy as np
import pytest

import needle as ndl

from steps import data, model_and_optimizer, state_arrays, step_function

STEPS = 30


def run(optimizer, compiled, changes):
    """``STEPS`` full-batch steps; ``changes[i](opt)`` runs before step ``i``."""
    model, opt = model_and_optimizer(optimizer)
    step = step_function(model, opt)
    if compiled:
        step = ndl.compile(step)
    images, labels = data()
    np.random.seed(1)
    losses, saved = [], {}
    for index in range(STEPS):
        if index in changes:
            changes[index](opt, saved)
        x, y = images[(index % 4) * 32 : (index % 4) * 32 + 32], labels[(index % 4) * 32 : (index % 4) * 32 + 32]
        losses.append(step(ndl.Tensor(x), ndl.Tensor(y)).numpy().copy())
    return losses, state_arrays(model, opt), step


def save(opt, saved):
    saved["state"] = copy.deepcopy(opt.state_dict())


def load(opt, saved):
    opt.load_state_dict(saved["state"])


def set_attribute(name, value):
    def change(opt, saved):
        setattr(opt, name, value)

    return change


SGD_CHANGES = {5: save, 9: set_attribute("momentum", 0.5), 13: set_attribute("weight_decay", 0.0), 17: load,
               21: set_attribute("momentum", 0.0), 25: set_attribute("momentum", 0.8)}
ADAM_CHANGES = {5: save, 9: set_attribute("beta1", 0.5), 13: set_attribute("weight_decay", 0.0), 17: load,
                21: set_attribute("eps", 1e-3)}


@pytest.mark.parametrize("optimizer, changes", [("sgd", SGD_CHANGES), ("adam", ADAM_CHANGES)])
def test_changes_between_replays_match_eager_bitwise(optimizer, changes):
    eager_losses, eager_state, _ = run(optimizer, False, changes)
    losses, state, step = run(optimizer, True, changes)
    assert step.replays == STEPS - step.captures and step.replays > STEPS // 2
    for index, (expected, got) in enumerate(zip(eager_losses, losses)):
        assert expected.tobytes() == got.tobytes(), f"loss of step {index}: {expected} != {got}"
    assert sorted(state) == sorted(eager_state)
    for name, expected in eager_state.items():
        assert expected.tobytes() == state[name].tobytes(), name


@pytest.mark.parametrize("optimizer, changes", [("sgd", SGD_CHANGES), ("adam", ADAM_CHANGES)])
def test_the_changes_matter(optimizer, changes):
    """The test above would pass with the changes ignored only if they did not change the result."""
    unchanged, _, _ = run(optimizer, True, {})
    changed, _, _ = run(optimizer, True, changes)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(unchanged[:10], changed[:10]))
    assert any(a.tobytes() != b.tobytes() for a, b in zip(unchanged[10:], changed[10:]))


def test_adam_counts_every_replayed_step():
    model, opt = model_and_optimizer("adam")
    step = ndl.compile(step_function(model, opt))
    images, labels = data()
    for _ in range(5):
        step(ndl.Tensor(images[:32]), ndl.Tensor(labels[:32]))
    assert (step.replays, opt.t) == (4, 5)
