"""What a step changes besides its arrays: the models' attributes it sets, and compiled functions
it calls.

- A step that switches its model's mode (``model.train()`` at its start, ``model.eval()`` in an
  evaluation) is kept under the signature it was called with, and every replay sets the
  attributes again as the capture left them: alternating such steps replays, bitwise as eager.
- A counter the step increments makes each call a new signature: correct values, and the
  RecaptureWarning names the attribute.
- A compiled function called inside another one's capture runs inline, so the outer plan
  records its work (a replay of its own would compute on buffers the capture cannot see).
"""
import warnings

import numpy as np
import pytest

import needle as ndl
import needle.nn as nn
from needle.compiler.compiled import NUMPY_MAJOR
from steps import data, model_and_optimizer, state_arrays, step_function

pytestmark = pytest.mark.skipif(NUMPY_MAJOR < 2, reason="ndl.compile needs numpy 2")


def batch(index, size=16):
    images, labels = data()
    start = (index * size) % 144
    return ndl.Tensor(images[start : start + size]), ndl.Tensor(labels[start : start + size])


def train_and_evaluate(compiled, rounds=4):
    """Per round: three training steps, then two evaluations, each function setting the mode itself."""
    model, opt = model_and_optimizer()
    loss_fn = nn.SoftmaxLoss()

    def train_step(x, y):
        model.train()
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    def evaluate(x, y):
        model.eval()
        with ndl.no_grad():
            return loss_fn(model(x), y)

    if compiled:
        train_step, evaluate = ndl.compile(train_step), ndl.compile(evaluate)
    np.random.seed(4)
    losses, modes, index = [], [], 0
    for _ in range(rounds):
        for _ in range(3):
            losses.append(train_step(*batch(index)).numpy())
            modes.append(model.training)
            index += 1
        for _ in range(2):
            losses.append(evaluate(*batch(index)).numpy())
            modes.append(model.training)
            index += 1
    return losses, modes, state_arrays(model, opt), (train_step, evaluate)


def test_steps_that_set_the_models_mode_replay_and_leave_the_mode_eager_leaves():
    eager_losses, eager_modes, eager_state, _ = train_and_evaluate(False)
    losses, modes, state, (train_step, evaluate) = train_and_evaluate(True)
    assert all(np.array_equal(a, b) for a, b in zip(eager_losses, losses))
    assert modes == eager_modes == [True, True, True, False, False] * 4
    assert all(np.array_equal(eager_state[name], state[name]) for name in state)
    # one plan per mode a call comes in with: training (the first call; the first evaluation of a
    # round) and evaluation (every other call): then replays only, each leaving eager's mode
    assert (train_step.captures, train_step.replays) == (2, 10)
    assert (evaluate.captures, evaluate.replays) == (2, 6)


class CountingLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(12, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.linear(x)


def test_a_counter_the_step_increments_captures_every_call_and_the_warning_names_it():
    model = CountingLinear()
    forward = ndl.compile(lambda x: model(x))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [forward(batch(index)[0]).numpy() for index in range(10)]
    assert model.calls == 10, "the counter is eager's"
    assert forward.captures == 10 and forward.replays == 0
    messages = [str(w.message) for w in caught if issubclass(w.category, ndl.RecaptureWarning)]
    assert len(messages) == 1 and "CountingLinear.calls (to 9)" in messages[0]
    for index, result in enumerate(results):
        expected = model.linear(batch(index)[0]).numpy()
        assert np.array_equal(result, expected)


def test_a_compiled_function_called_while_another_captures_runs_inline():
    results = {}
    for compiled in (False, True):
        model, opt = model_and_optimizer()
        loss_fn = nn.SoftmaxLoss()

        def logits_of(x):
            with ndl.no_grad():
                return model(x)

        def step(x, y):
            opt.reset_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss, inner(x)  # the logits after the update, without a graph

        inner = ndl.compile(logits_of) if compiled else (lambda x: logits_of(x).detach())
        if compiled:
            inner(batch(0)[0])  # it has a plan of its own already: the capture must not replay it
            step = ndl.compile(step)
        np.random.seed(6)
        results[compiled] = [[t.numpy() for t in step(*batch(index))] for index in range(6)]
        if compiled:
            assert step.captures == 1 and step.replays == 5
            assert inner.captures == 1 and inner.replays == 0, "inline at the capture, not called by replays"
    for eager, replayed in zip(results[False], results[True]):
        assert all(np.array_equal(a, b) for a, b in zip(eager, replayed))


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_learning_rate_the_step_sets_from_its_argument_is_the_one_each_replay_uses(optimizer):
    """``opt.lr = lr`` inside the step, ``lr`` an argument cycling through three values: one plan
    per value, and each replay sets ``opt.lr`` again before its update (the last capture's value
    would be left otherwise), even where the capturing call set it to the value it had."""
    runs = {}
    for compiled in (False, True):
        model, opt = model_and_optimizer(optimizer)
        train_step = step_function(model, opt)

        def step(x, y, lr):
            opt.lr = lr
            return train_step(x, y)

        step = ndl.compile(step) if compiled else step
        first_lr = opt.lr  # the first call sets the value it already has
        np.random.seed(4)
        rates = [first_lr, first_lr * 0.1, first_lr * 0.5]
        losses = [step(*batch(index), rates[index % 3]).numpy() for index in range(12)]
        runs[compiled] = (losses, state_arrays(model, opt), opt.lr, step)
    (eager_losses, eager_state, eager_lr, _), (losses, state, lr, step) = runs[False], runs[True]
    assert all(np.array_equal(a, b) for a, b in zip(eager_losses, losses))
    assert all(np.array_equal(eager_state[name], state[name]) for name in state)
    assert lr == eager_lr == rates[2]
    assert step.captures == 3 and step.replays == 9


def test_a_learning_rate_set_between_calls_is_not_undone_by_the_replay():
    model, opt = model_and_optimizer()
    step = ndl.compile(step_function(model, opt))
    step(*batch(0)), step(*batch(1))
    opt.lr = 0.5
    step(*batch(2))
    assert opt.lr == 0.5


def test_the_assignment_watch_leaves_the_classes_as_they_were():
    from needle.compiler.assignment_watch import AssignmentWatch

    class Homework:
        lr = 0.5  # a class default the instance does not override

        @property
        def momentum(self):  # a property of the class: not watched
            return 0.0

    first, second, other = Homework(), Homework(), Homework()
    with AssignmentWatch([first, second], lambda obj: ("lr", "momentum")) as watch:
        assert first.lr == 0.5  # the class default, read through the watch
        first.lr = 0.5
        other.lr = 0.1  # not watched: not noted
    assert watch.assigned == {first: {"lr"}}
    assert vars(Homework)["lr"] == 0.5 and isinstance(vars(Homework)["momentum"], property)
    assert first.lr == 0.5 and second.lr == 0.5 and other.lr == 0.1
