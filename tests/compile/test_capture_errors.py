"""What a capture cannot replay raises CaptureError at the user's line, with the fix."""
import inspect

import numpy as np
import pytest

import needle as ndl
import needle.nn as nn
from needle.compiler.traced_array import TracedArray

from steps import model_and_optimizer


def line_of(function, text):
    source, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(source) if text in line)


READS = {
    "float": (lambda loss: float(loss), ".item()"),  # Tensor.__float__ reads item()
    "item": (lambda loss: loss.item(), ".item()"),
    "numpy": (lambda loss: loss.numpy() * 2, ".numpy()"),
    "branch": (lambda loss: 1 if loss.numpy() > 0 else 0, ".numpy()"),
    "bool": (lambda loss: bool(loss), ".item()"),
}


@pytest.mark.parametrize("name", sorted(READS))
def test_reading_a_value_while_capturing_names_the_line_and_the_fix(name):
    read, kind = READS[name]
    model, opt = model_and_optimizer()
    loss_fn = nn.SoftmaxLoss()

    def step(x, y):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        read(loss)  # the read
        loss.backward()
        opt.step()
        return loss

    compiled = ndl.compile(step)
    x, y = ndl.Tensor(np.ones((4, 12), np.float32)), ndl.Tensor(np.array([0, 1, 2, 3]))
    with pytest.raises(ndl.CaptureError) as caught:
        compiled(x, y)
    message = str(caught.value)
    assert f"{__file__}:{line_of(READS[name][0], 'lambda')}" in message
    assert kind in message
    assert "Return the tensor from the compiled function and read it after the call" in message
    # nothing is left traced: the same step runs eagerly afterwards, and the model's arrays are plain
    assert all(type(p.realize_cached_data().raw) is np.ndarray for p in model.parameters())
    assert type(model.modules[1].running_mean.realize_cached_data().raw) is np.ndarray
    loss_fn(model(x), y).backward()
    assert compiled.captures == 0


def test_the_error_names_the_line_in_the_step():
    model, opt = model_and_optimizer()

    def step(x):
        value = float(model(x).sum())
        return value

    with pytest.raises(ndl.CaptureError) as caught:
        ndl.compile(step)(ndl.Tensor(np.ones((4, 12), np.float32)))
    assert caught.value.where == f"{__file__}:{line_of(step, 'float(')}"


class Box:
    pass


def test_an_optimizer_the_step_cannot_reach_is_refused():
    model, opt = model_and_optimizer()
    box = Box()
    box.inner = Box()
    box.inner.inner = Box()
    box.inner.inner.opt = opt  # deeper than ndl.compile looks

    def step(x, y):
        loss = nn.SoftmaxLoss()(model(x), y)
        loss.backward()
        box.inner.inner.opt.step()
        return loss

    with pytest.raises(ndl.CaptureError, match="an optimizer that the compiled function does not reach.*SGD"):
        ndl.compile(step)(ndl.Tensor(np.ones((4, 12), np.float32)), ndl.Tensor(np.array([0, 1, 2, 3])))
    assert all(type(p.realize_cached_data().raw) is np.ndarray for p in model.parameters())


def test_outside_a_capture_a_traced_array_is_a_plain_array():
    traced = np.arange(4.0).view(TracedArray)
    assert type(traced + 1) is np.ndarray
    assert float(traced.sum()) == 6.0
    assert repr(traced) == repr(np.arange(4.0))


def test_compile_needs_a_function():
    with pytest.raises(TypeError, match="ndl.compile needs a function, got int 3"):
        ndl.compile(3)


def test_a_python_decision_on_a_constant_the_step_makes_is_no_error():
    """An array the step makes and fills itself (not from its inputs or state) has the same value at
    every replay, so reading it into Python is allowed; reading the loss is not (the test above)."""
    np.random.seed(0)
    model = nn.Linear(3, 2)
    opt = ndl.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        opt.reset_grad()
        mask = np.zeros(3, dtype=np.float32)
        mask[1] = 1.0
        if mask.sum() > 0:
            x = x * ndl.Tensor(mask)
        out = model(x)
        loss = (out * out).sum()
        loss.backward()
        opt.step()
        return loss

    compiled = ndl.compile(step)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(3)]
    got = [compiled(ndl.Tensor(x)).numpy().copy() for x in inputs]
    np.random.seed(0)
    model = nn.Linear(3, 2)
    opt = ndl.optim.SGD(model.parameters(), lr=0.1)
    expected = [step(ndl.Tensor(x)).numpy().copy() for x in inputs]
    assert compiled.replays == 2 and [a.tobytes() for a in got] == [a.tobytes() for a in expected]


def test_printing_a_tensor_while_capturing_shows_that_its_value_is_not_known_yet(capsys):
    """A print in a compiled step runs at capture only (a Python side effect); it shows a
    placeholder instead of raising, as a jax tracer prints, and replays print nothing."""
    import needle as ndl

    model = ndl.nn.Linear(3, 2)

    @ndl.compile
    def forward(x):
        with ndl.no_grad():
            out = model(x)
        print("out:", out, repr(out))
        return out

    x = ndl.Tensor(np.ones((4, 3), np.float32))
    first, second = forward(x), forward(x)
    printed = capsys.readouterr().out
    assert printed.count("out:") == 1 and "its value is not known while capturing" in printed
    assert "needle.Tensor(<traced array shape=(4, 2) dtype=float32" in printed
    assert np.array_equal(first.numpy(), second.numpy())
    assert "[[" in str(second)  # outside a capture, values as ever


def test_torch_compiles_options_are_refused_by_name():
    import needle as ndl

    with pytest.raises(TypeError, match=r"ndl.compile takes no options \(got mode='max-autotune', fullgraph=True\)"):
        ndl.compile(lambda x: x, mode="max-autotune", fullgraph=True)
    with pytest.raises(TypeError, match="dynamic=False"):
        ndl.compile(dynamic=False)

    @ndl.compile()
    def double(x):
        return x * 2

    assert double(ndl.Tensor(np.ones(2, np.float32), requires_grad=False)).numpy().tolist() == [2.0, 2.0]
