"""The repeat guard: a repeated call replays through one generated check, and any change falls back.

Each case changes one thing the signature or the plan's state depends on and checks that the
call then does what the full checks decide (another plan, a capture), bitwise as eager.
"""
import numpy as np
import pytest

import needle as ndl
from needle.compiler.compiled import NUMPY_MAJOR
from steps import data, model_and_optimizer, state_arrays, step_function

pytestmark = pytest.mark.skipif(NUMPY_MAJOR < 2, reason="ndl.compile needs numpy 2")


def batch(start=0, size=8):
    images, labels = data()
    return ndl.Tensor(images[start : start + size]), ndl.Tensor(labels[start : start + size])


def counting_full_checks(step):
    calls = []
    full = step._checked_entry

    def counted(args, kwargs):
        calls.append(1)
        return full(args, kwargs)

    step._checked_entry = counted
    return calls


def compiled_step():
    model, opt = model_and_optimizer()
    return model, opt, ndl.compile(step_function(model, opt))


def test_repeated_calls_replay_through_the_guard_alone():
    model, opt, step = compiled_step()
    step(*batch(0)), step(*batch(8))  # a capture, then a replay by the full checks
    calls = counting_full_checks(step)
    for start in (16, 24, 32, 40):
        step(*batch(start))
    assert calls == [] and step.captures == 1 and step.replays == 5


def run_with_change(change, compiled):
    """Three steps, the change, a fourth step: its loss, the state after it, and the full checks it made."""
    np.random.seed(5)
    model, opt = model_and_optimizer()
    step = step_function(model, opt)
    if compiled:
        step = ndl.compile(step)
    for start in (0, 8, 16):
        step(*batch(start))
    calls = counting_full_checks(step) if compiled else None
    x, y = batch(24)
    if change == "eval":
        model.eval()
    elif change == "new weight tensor":
        model.modules[0].weight = ndl.nn.Parameter(model.modules[0].weight.numpy() * 0.5)
        opt.params = list(model.parameters())
    elif change == "new weight data":
        model.modules[0].weight.data = ndl.Tensor(model.modules[0].weight.numpy() * 0.5)
    elif change == "attribute added":
        model.modules[2].note = "changed"
    elif change == "batch size":
        x, y = batch(24, 5)
    elif change == "int32 labels":
        y = ndl.Tensor(y.numpy().astype(np.int32))
    loss = step(x, y)
    return loss.numpy().tobytes(), state_arrays(model, opt), calls, step


@pytest.mark.parametrize("change", ["eval", "batch size", "new weight tensor", "new weight data", "attribute added", "int32 labels"])
def test_any_change_takes_the_full_checks_and_matches_eager(change):
    loss, state, calls, step = run_with_change(change, compiled=True)
    eager_loss, eager_state, _, _ = run_with_change(change, compiled=False)
    assert calls, "the guard let a changed call replay without the full checks"
    assert loss == eager_loss
    assert all(state[name].tobytes() == eager_state[name].tobytes() for name in eager_state)


def test_the_guard_says_no_under_another_gradient_mode():
    model, opt, step = compiled_step()
    x, y = batch(0)
    step(x, y), step(x, y)
    assert step._repeat[0]((x, y)) is True
    with ndl.no_grad():
        assert step._repeat[0]((x, y)) is False


def test_a_guard_that_fails_on_every_call_is_dropped_and_calls_still_replay():
    model, opt, step = compiled_step()
    step(*batch(0)), step(*batch(8))
    entry = step._repeat[1]
    for start in (16, 24, 32, 40):
        model.modules[3].p = float("0.25")  # an equal value, a new object each call
        step(*batch(start))
    assert step._guards[id(entry)] is None and step._repeat is None
    assert step.captures == 1 and step.replays == 5


def test_a_call_with_keywords_takes_the_full_checks():
    model, opt, step = compiled_step()
    x, y = batch(0)
    step(x=x, y=y), step(x=x, y=y)
    assert step._repeat is None and step.replays == 1
