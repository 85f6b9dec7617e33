"""numpy arrays as a compiled step's arguments: inputs by shape and dtype, as Tensors are.

A loop that slices numpy batches and makes the Tensors inside the step (``ndl.Tensor(x)``) is
captured once and replays every later batch, bitwise as eager; so is a step that converts its
batch with ``numpy.asarray`` or ``numpy.ascontiguousarray``, which hand back plain arrays.
"""
import numpy as np
import pytest

import needle as ndl
import needle.nn as nn
from needle.compiler.compiled import NUMPY_MAJOR
from steps import data, model_and_optimizer, state_arrays, step_function

pytestmark = pytest.mark.skipif(NUMPY_MAJOR < 2, reason="ndl.compile needs numpy 2")

CONVERSIONS = {
    "Tensor": lambda x: ndl.Tensor(x),
    "asarray": lambda x: ndl.Tensor(np.asarray(x, dtype=np.float64), dtype="float32"),
    "ascontiguousarray of a transpose": lambda x: ndl.Tensor(np.ascontiguousarray(x.T).T),
    "array copy, scaled": lambda x: ndl.Tensor(np.array(x) * 0.5 + 1),
}


def numpy_step(model, opt, convert):
    loss_fn = nn.SoftmaxLoss()

    def step(x, y):
        opt.reset_grad()
        loss = loss_fn(model(convert(x)), ndl.Tensor(y))
        loss.backward()
        opt.step()
        return loss

    return step


def train_on_numpy(step, steps=12, batch_size=32):
    images, labels = data()
    np.random.seed(1)
    losses, start = [], 0
    for _ in range(steps):
        if start >= len(images):
            start = 0
        # 150 samples: every fifth batch is a partial one of 22
        losses.append(step(images[start : start + batch_size], labels[start : start + batch_size]).numpy().copy())
        start += batch_size
    return losses


@pytest.mark.parametrize("conversion", sorted(CONVERSIONS))
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_numpy_batches_replay_bitwise(conversion, optimizer):
    runs = {}
    for compiled in (False, True):
        model, opt = model_and_optimizer(optimizer)
        step = numpy_step(model, opt, CONVERSIONS[conversion])
        if compiled:
            step = ndl.compile(step)
        runs[compiled] = (train_on_numpy(step), state_arrays(model, opt), step)
    (eager_losses, eager_state, _), (losses, state, compiled_step) = runs[False], runs[True]
    assert all(np.array_equal(a, b) for a, b in zip(eager_losses, losses))
    assert eager_state.keys() == state.keys()
    assert all(np.array_equal(eager_state[name], state[name]) for name in state)
    assert compiled_step.captures == 2, "one plan for the full batches, one for the partial batch"
    assert compiled_step.replays == 10


def test_a_numpy_batch_and_a_tensor_batch_get_plans_of_their_own():
    model, opt = model_and_optimizer()
    step = ndl.compile(numpy_step(model, opt, lambda x: x if isinstance(x, ndl.Tensor) else ndl.Tensor(x)))
    images, labels = data()
    x, y = images[:8], labels[:8]
    step(x, y), step(x, y), step(ndl.Tensor(x), y), step(ndl.Tensor(x), y)
    assert step.captures == 2 and step.replays == 2


def test_repeated_numpy_calls_replay_through_the_repeat_guard():
    model, opt = model_and_optimizer()
    step = ndl.compile(numpy_step(model, opt, ndl.Tensor))
    images, labels = data()
    step(images[:8], labels[:8]), step(images[8:16], labels[8:16])
    full_checks = []
    checked = step._checked_entry
    step._checked_entry = lambda args, kwargs: full_checks.append(1) or checked(args, kwargs)
    for start in (16, 24, 32):
        step(images[start : start + 8], labels[start : start + 8])
    assert full_checks == [] and step.captures == 1 and step.replays == 4
    step(images[:4], labels[:4])  # another shape: the full checks, a new plan
    assert full_checks == [1] and step.captures == 2


def test_the_caller_may_reuse_its_numpy_batch_after_the_call():
    images, labels = data()
    results = {}
    for compiled in (False, True):
        model, opt = model_and_optimizer()
        step = numpy_step(model, opt, ndl.Tensor)
        step = ndl.compile(step) if compiled else step
        x, y = np.empty((8, images.shape[1]), images.dtype), np.empty(8, labels.dtype)  # the loop's own buffers
        np.random.seed(2)
        losses = []
        for start in (0, 8, 16, 24):
            x[...], y[...] = images[start : start + 8], labels[start : start + 8]
            losses.append(step(x, y))
            x[...] = 0  # changed after the call: changes nothing the call returned or did
        results[compiled] = [loss.numpy() for loss in losses], [p.numpy() for p in model.parameters()]
    for eager, replayed in zip(results[False], results[True]):
        assert all(np.array_equal(a, b) for a, b in zip(eager, replayed))


def test_an_array_of_strings_is_a_python_value_not_an_input():
    from needle.compiler.arguments import argument_key as _argument_key

    assert _argument_key(np.zeros((2, 3), np.float32)) == ("array", (2, 3), np.dtype("float32"))
    assert _argument_key(np.array(["a", "b"]))[0] == "object"


BATCH_FORMS = {
    "tuple": lambda x, y: ((x, y),),
    "list": lambda x, y: ([x, y],),
    "dict": lambda x, y: ({"image": x, "label": y},),
    "namedtuple": lambda x, y: (Batch(x, y),),
    "nested, numpy labels": lambda x, y: (((x,), {"label": y.numpy()}),),
}


class Batch(tuple):
    """A namedtuple-like batch (``_fields``), as some loaders yield."""

    _fields = ("image", "label")

    def __new__(cls, image, label):
        return super().__new__(cls, (image, label))


def _unpack(batch):
    if isinstance(batch, dict):
        return batch["image"], batch["label"]
    if isinstance(batch[1], dict):
        return batch[0][0], ndl.Tensor(batch[1]["label"])
    return batch[0], batch[1]


@pytest.mark.parametrize("form", sorted(BATCH_FORMS))
def test_a_batch_passed_in_a_container_is_an_input(form):
    """``step(batch)`` with the Tensors inside a tuple, list, dict or namedtuple: inputs by shape,
    replayed bitwise, one plan per batch shape (not one per call)."""
    runs = {}
    for compiled in (False, True):
        model, opt = model_and_optimizer()
        train_step = step_function(model, opt)

        def step(batch):
            return train_step(*_unpack(batch))

        step = ndl.compile(step) if compiled else step
        images, labels = data()
        np.random.seed(1)
        losses, start = [], 0
        for _ in range(12):
            start = 0 if start >= len(images) else start
            x, y = ndl.Tensor(images[start : start + 32]), ndl.Tensor(labels[start : start + 32])
            losses.append(step(*BATCH_FORMS[form](x, y)).numpy())
            start += 32
        runs[compiled] = (losses, state_arrays(model, opt), step)
    (eager_losses, eager_state, _), (losses, state, compiled_step) = runs[False], runs[True]
    assert all(np.array_equal(a, b) for a, b in zip(eager_losses, losses))
    assert all(np.array_equal(eager_state[name], state[name]) for name in state)
    assert compiled_step.captures == 2 and compiled_step.replays == 10


def test_repeated_calls_with_a_batch_container_replay_through_the_repeat_guard():
    model, opt = model_and_optimizer()
    loss_fn = nn.SoftmaxLoss()

    @ndl.compile
    def step(batch):
        opt.reset_grad()
        loss = loss_fn(model(batch["image"]), ndl.Tensor(batch["label"]))
        loss.backward()
        opt.step()
        return loss

    images, labels = data()

    def batch(start, size=8):
        return {"image": ndl.Tensor(images[start : start + size]), "label": labels[start : start + size]}

    step(batch(0)), step(batch(8))
    full_checks = []
    checked = step._checked_entry
    step._checked_entry = lambda args, kwargs: full_checks.append(1) or checked(args, kwargs)
    for start in (16, 24, 32):
        step(batch(start))
    assert full_checks == [] and step.captures == 1 and step.replays == 4
    step({"label": labels[:8], "image": ndl.Tensor(images[:8])})  # the keys in another order: the full checks, the same plan
    step(batch(0, 4))  # another shape: a new plan
    assert len(full_checks) == 2 and step.captures == 2


@pytest.mark.parametrize("backward", ["course", "create_graph=False"])
def test_an_input_gradient_returned_by_the_step_is_each_calls_own(backward):
    """An input gradient (an adversarial example, a saliency map): returned from the step, it is
    computed at every replay, bitwise eager's, for inputs in containers too. (Left unreturned,
    the replay drops it as work nobody observes: ``x.grad`` is not set by a replay.)"""
    model, _ = model_and_optimizer()
    model.eval()
    loss_fn = nn.SoftmaxLoss()
    options = {} if backward == "course" else {"create_graph": False}

    def gradient_step(batch):
        loss = loss_fn(model(batch[0]), batch[1])
        loss.backward(**options)
        return loss, batch[0].grad

    compiled = ndl.compile(gradient_step)
    images, labels = data()
    kept = []
    for start in (0, 16, 32, 48):
        x, x_eager = (ndl.Tensor(images[start : start + 16], requires_grad=True) for _ in range(2))
        y = ndl.Tensor(labels[start : start + 16])
        _, grad = compiled((x, y))
        _, expected = gradient_step((x_eager, y))
        assert np.array_equal(grad.numpy(), expected.numpy())
        kept.append((grad, expected.numpy()))
    assert all(np.array_equal(grad.numpy(), expected) for grad, expected in kept), "each call's gradient its own"
    assert compiled.captures == 1 and compiled.replays == 3
