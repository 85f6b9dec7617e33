"""The holder chain: a retained loss inside a tuple, dict, object or dataclass kept in a container.

Each loop stands for a user's code that keeps a loss for a curve or a log. The warning must name
the container the user can name, the line that adds to it, and a fix for that line that keeps the
holder's type; the fixed loop runs silent.
"""
import collections
import dataclasses
import inspect
import warnings

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim
from trainers import GraphLeakWarning, MemoryMonitor, NoGradWarning


def make_problem():
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    rng = np.random.default_rng(0)
    X = rng.standard_normal((16, 4)).astype(np.float32)
    y = X[:, :3].argmax(axis=1).astype(np.float32)
    return model, optim.SGD(model.parameters(), lr=0.05), ndl.Tensor(X, requires_grad=False), ndl.Tensor(y, requires_grad=False)


def step_loss(model, opt, X, y):
    opt.reset_grad()
    loss = nn.SoftmaxLoss()(model(X), y)
    loss.backward()
    opt.step()
    return loss


@dataclasses.dataclass
class StepStats:
    step: int
    loss: object


class Point:
    def __init__(self, step, loss):
        self.step = step
        self.loss = loss


class ScalarWriter:
    """A TensorBoard-style writer that keeps what it is given."""

    def __init__(self):
        self.scalars = {}

    def add_scalar(self, tag, value, step):
        self.scalars.setdefault(tag, []).append((step, value))  # ADD writer


class FixedWriter(ScalarWriter):
    def add_scalar(self, tag, value, step):
        self.scalars.setdefault(tag, []).append((step, value.item()))


def tuple_curve(monitor, steps, fixed=False):
    model, opt, X, y = make_problem()
    curve = []
    for step in range(steps):
        loss = step_loss(model, opt, X, y)
        if fixed:
            curve.append((step, loss.item()))
        else:
            curve.append((step, loss))  # ADD tuple
        monitor.step()
    return curve


def dict_log(monitor, steps, fixed=False):
    model, opt, X, y = make_problem()
    log = []
    for step in range(steps):
        loss = step_loss(model, opt, X, y)
        if fixed:
            log.append({"step": step, "loss": loss.item()})
        else:
            log.append({"step": step, "loss": loss})  # ADD dict
        monitor.step()
    return log


def dataclass_log(monitor, steps, fixed=False):
    model, opt, X, y = make_problem()
    log = []
    for step in range(steps):
        loss = step_loss(model, opt, X, y)
        if fixed:
            log.append(StepStats(step, loss.item()))
        else:
            log.append(StepStats(step, loss))  # ADD dataclass
        monitor.step()
    return log


def object_log(monitor, steps, fixed=False):
    model, opt, X, y = make_problem()
    points = []
    for step in range(steps):
        loss = step_loss(model, opt, X, y)
        if fixed:
            points.append(Point(step, loss=loss.item()))
        else:
            points.append(Point(step, loss=loss))  # ADD object
        monitor.step()
    return points


def deque_of_tuples(monitor, steps, fixed=False):
    model, opt, X, y = make_problem()
    recent = collections.deque(maxlen=1000)
    for step in range(steps):
        loss = step_loss(model, opt, X, y)
        if fixed:
            recent.append((step, {"train": loss.item()}))
        else:
            recent.append((step, {"train": loss}))  # ADD nested
        monitor.step()
    return recent


def writer_in_helper(monitor, steps, fixed=False):
    model, opt, X, y = make_problem()
    writer = FixedWriter() if fixed else ScalarWriter()
    for step in range(steps):
        loss = step_loss(model, opt, X, y)
        writer.add_scalar("loss", loss, step)
        monitor.step()
    return writer


CASES = {
    "tuple": (tuple_curve, "curve", "curve.append((step, loss.item()))"),
    "dict": (dict_log, "log", "log.append({'step': step, 'loss': loss.item()})"),
    "dataclass": (dataclass_log, "log", "log.append(StepStats(step, loss.item()))"),
    "object": (object_log, "points", "points.append(Point(step, loss=loss.item()))"),
    "nested": (deque_of_tuples, "recent", "recent.append((step, {'train': loss.item()}))"),
    "writer": (ScalarWriter.add_scalar, "self.scalars.setdefault(tag, [])", "self.scalars.setdefault(tag, []).append((step, value.item()))"),
}


def line_of(function, marker):
    lines, first = inspect.getsourcelines(function)
    hits = [first + i for i, line in enumerate(lines) if line.rstrip().endswith(f"# ADD {marker}")]
    assert len(hits) == 1
    return hits[0]


def run(loop, steps=30, **kwargs):
    monitor = MemoryMonitor()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loop(monitor, steps, **kwargs)
    return [w for w in caught if issubclass(w.category, (GraphLeakWarning, NoGradWarning))]


LOOPS = {"tuple": tuple_curve, "dict": dict_log, "dataclass": dataclass_log, "object": object_log,
         "nested": deque_of_tuples, "writer": writer_in_helper}


@pytest.mark.parametrize("shape", sorted(CASES))
def test_the_warning_names_the_container_its_adding_line_and_the_fix(shape):
    function, name, fix = CASES[shape]
    caught = run(LOOPS[shape])
    assert len(caught) == 1, [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert (caught[0].filename, caught[0].lineno) == (__file__, line_of(function, shape)), message
    assert f"The container `{name}`" in message, message
    assert f"`{fix}`" in message, message


@pytest.mark.parametrize("shape", sorted(CASES))
def test_the_fixed_loop_is_silent(shape):
    assert run(LOOPS[shape], fixed=True) == []


def test_the_suggested_fix_runs_and_keeps_the_holders_type():
    """The rewritten line is valid code and stores a number where the tensor was, in the same holder."""
    loss = ndl.Tensor([2.5], requires_grad=False)
    step, curve, log = 3, [], []
    exec(CASES["tuple"][2], {}, {"curve": curve, "step": step, "loss": loss})
    exec(CASES["dict"][2], {}, {"log": log, "step": step, "loss": loss})
    assert curve == [(3, 2.5)] and log == [{"step": 3, "loss": 2.5}]
