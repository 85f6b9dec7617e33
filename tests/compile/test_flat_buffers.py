"""Flat buffers in a replay: one optimizer update over all parameters, with the eager values bitwise."""
import numpy as np
import pytest

import needle as ndl
from needle.compiler import flat_buffers
from needle.compiler.flat_buffers import flat_root

from steps import data, model_and_optimizer, state_arrays, step_function


def replayed(optimizer, steps=6, step_of=step_function):
    model, opt = model_and_optimizer(optimizer)
    step = ndl.compile(step_of(model, opt))
    images, labels = data()
    np.random.seed(1)
    results = [step(ndl.Tensor(images[:32]), ndl.Tensor(labels[:32])) for _ in range(steps)]
    return model, opt, step, results


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_parameters_gradients_and_state_each_tile_one_flat_buffer(optimizer):
    model, opt, step, _ = replayed(optimizer)
    assert step.replays >= 4
    weights = [p.cached_data.raw for p in opt.params]
    gradients = [p.grad.cached_data.raw for p in opt.params]
    states = [opt.u.scaled] if optimizer == "sgd" else [opt.m, opt.v]
    buffers = [flat_root(weights), flat_root(gradients)] + [flat_root([s[p] for p in opt.params]) for s in states]
    assert all(buffer is not None for buffer in buffers)
    assert buffers[0].size == sum(p.cached_data.raw.size for p in opt.params)
    assert len({id(buffer) for buffer in buffers}) == len(buffers)  # four distinct buffers (five for Adam)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_replayed_update_is_one_call_over_all_parameters(optimizer, monkeypatch):
    model, opt, step, _ = replayed(optimizer)
    kernels = opt.params[0].cached_data.device.kernels
    name = "momentum_steps" if optimizer == "sgd" else "adam_steps"
    calls, original = [], getattr(kernels, name)

    def counting(updates, *args):
        calls.append([update[0].size for update in updates])
        return original(updates, *args)

    monkeypatch.setattr(kernels, name, counting)
    images, labels = data()
    step(ndl.Tensor(images[:32]), ndl.Tensor(labels[:32]))
    assert calls == [[sum(p.cached_data.raw.size for p in opt.params)]]


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_flat_replays_match_eager_bitwise(optimizer):
    model, opt = model_and_optimizer(optimizer)
    eager = step_function(model, opt)
    images, labels = data()
    np.random.seed(1)
    eager_losses = [eager(ndl.Tensor(images[:32]), ndl.Tensor(labels[:32])).numpy() for _ in range(6)]
    expected = state_arrays(model, opt)
    model, opt, step, results = replayed(optimizer)
    assert [r.numpy().tobytes() for r in results] == [loss.tobytes() for loss in eager_losses]
    got = state_arrays(model, opt)
    assert sorted(got) == sorted(expected)
    for name, array in expected.items():
        assert np.asarray(got[name]).tobytes() == np.asarray(array).tobytes(), name


def test_a_gradient_the_step_returns_stays_where_it_is_and_keeps_its_values():
    def step_of(model, opt):
        inner = step_function(model, opt)

        def step(x, y):
            loss = inner(x, y)
            return loss, opt.params[0].grad

        return step

    model, opt, step, results = replayed("sgd", step_of=step_of)
    assert flat_root([p.grad.cached_data.raw for p in opt.params]) is None  # left per parameter
    assert flat_root([p.cached_data.raw for p in opt.params]) is not None
    returned = results[-1][1].numpy()
    assert returned.tobytes() == opt.params[0].grad.numpy().tobytes()


def test_a_parameter_that_views_another_array_is_not_moved():
    base = np.arange(12, dtype=np.float32)
    first = ndl.nn.Parameter(ndl.Tensor(np.zeros(3, np.float32)))
    second = ndl.nn.Parameter(ndl.Tensor(np.zeros(3, np.float32)))
    first.cached_data.raw = base[:3]  # a view: moving it would break what it shares with base
    opt = ndl.optim.SGD([first, second], lr=0.1)
    flat_buffers.flatten_parameters([opt])
    assert first.cached_data.raw.base is base
    assert flat_root([first.cached_data.raw, second.cached_data.raw]) is None


def test_flat_root_needs_an_exact_tiling():
    flat = np.zeros(10, np.float32)
    assert flat_root([flat[:4].reshape(2, 2), flat[4:]]) is flat
    assert flat_root([flat[:4], flat[5:]]) is None  # a gap
    assert flat_root([flat[:4], flat[:4], flat[4:]]) is None  # an element twice
    assert flat_root([flat[::2]]) is None  # not contiguous
    assert flat_root([np.zeros(3, np.float32), flat]) is None  # another buffer
