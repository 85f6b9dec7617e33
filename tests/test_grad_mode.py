"""Grad mode: no_grad / enable_grad / set_grad_enabled nest, decorate, restore, and stay per thread."""
import threading

import numpy as np
import pytest

import needle as ndl
import needle.autograd
from needle import ops


def test_default_is_enabled():
    assert ndl.is_grad_enabled() is True


def test_no_grad_makes_every_result_a_constant(device, lazy_mode):
    x = ndl.Tensor([[1.0, 2.0]], device=device)
    w = ndl.Tensor([[0.5], [1.5]], device=device)
    with ndl.no_grad():
        assert ndl.is_grad_enabled() is False
        results = [x + w.transpose(), x * 2, x @ w, ops.relu(x), ops.logsumexp(x), ops.split(x, 1), x.sum()]
        results.append(results[-2][0])
    for y in results:
        assert y.op is None and len(y.inputs) == 0 and y.requires_grad is False
        assert y.cached_data is not None
    np.testing.assert_allclose(results[2].numpy(), [[3.5]])
    assert ndl.is_grad_enabled() is True


def test_no_grad_result_cannot_backward(device):
    x = ndl.Tensor([1.0], device=device)
    with ndl.no_grad():
        y = x * 2
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.backward()


def test_nesting():
    with ndl.no_grad():
        with ndl.enable_grad():
            assert ndl.is_grad_enabled()
            with ndl.no_grad():
                assert not ndl.is_grad_enabled()
                with ndl.no_grad():
                    assert not ndl.is_grad_enabled()
                assert not ndl.is_grad_enabled()
            assert ndl.is_grad_enabled()
        assert not ndl.is_grad_enabled()
    assert ndl.is_grad_enabled()


def test_enable_grad_records_inside_no_grad(device):
    x = ndl.Tensor([3.0], device=device)
    with ndl.no_grad():
        with ndl.enable_grad():
            y = x * x
    assert isinstance(y.op, ops.EWiseMul) and y.requires_grad
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0])


def test_decorators(device):
    x = ndl.Tensor([1.0], device=device)

    @ndl.no_grad()
    def evaluate(t):
        assert not ndl.is_grad_enabled()
        return t * 2

    @ndl.enable_grad()
    def train_step(t):
        assert ndl.is_grad_enabled()
        return t * 2

    @ndl.set_grad_enabled(False)
    def off(t):
        assert not ndl.is_grad_enabled()
        return t * 2

    assert ndl.is_grad_enabled(), "decorating must not change the mode"
    assert evaluate(x).requires_grad is False
    assert off(x).requires_grad is False
    with ndl.no_grad():
        assert train_step(x).requires_grad is True
        assert not ndl.is_grad_enabled()
    assert evaluate.__name__ == "evaluate"
    # a decorated function can be called again, and recursively
    assert evaluate(evaluate(x)).requires_grad is False
    assert ndl.is_grad_enabled()


def test_one_instance_can_be_reentered():
    switch = ndl.no_grad()
    with switch:
        with ndl.enable_grad():
            with switch:
                assert not ndl.is_grad_enabled()
            assert ndl.is_grad_enabled()
        assert not ndl.is_grad_enabled()
    assert ndl.is_grad_enabled()


@pytest.mark.parametrize(
    "switch", [ndl.no_grad, ndl.enable_grad, lambda: ndl.set_grad_enabled(False)], ids=["no_grad", "enable_grad", "set_grad_enabled"]
)
def test_exception_restores_the_flag(switch):
    for outer in (True, False):
        ndl.set_grad_enabled(outer)
        with pytest.raises(KeyError):
            with switch():
                raise KeyError("boom")
        assert ndl.is_grad_enabled() is outer
    ndl.set_grad_enabled(True)


def test_exception_in_a_decorated_function_restores_the_flag():
    @ndl.no_grad()
    def fails():
        raise ValueError("boom")

    with pytest.raises(ValueError):
        fails()
    assert ndl.is_grad_enabled()


def test_set_grad_enabled_as_a_plain_call_and_a_context_manager():
    ndl.set_grad_enabled(False)
    try:
        assert not ndl.is_grad_enabled()
        with ndl.set_grad_enabled(True):
            assert ndl.is_grad_enabled()
        assert not ndl.is_grad_enabled()
    finally:
        ndl.set_grad_enabled(True)
    assert ndl.is_grad_enabled()
    with ndl.set_grad_enabled(False):
        assert not ndl.is_grad_enabled()
    assert ndl.is_grad_enabled()


def test_grad_mode_is_thread_local():
    seen = {}

    def worker():
        seen["start"] = ndl.is_grad_enabled()
        with ndl.no_grad():
            seen["inside"] = ndl.is_grad_enabled()
            ready.set()
            release.wait(5)

    ready, release = threading.Event(), threading.Event()
    with ndl.no_grad():
        thread = threading.Thread(target=worker)
        thread.start()
        ready.wait(5)
        assert not ndl.is_grad_enabled()
        release.set()
        thread.join(5)
    assert seen == {"start": True, "inside": False}
    assert ndl.is_grad_enabled()


def test_a_thread_in_no_grad_does_not_switch_off_another():
    ready, release = threading.Event(), threading.Event()

    def worker():
        with ndl.no_grad():
            ready.set()
            release.wait(5)

    thread = threading.Thread(target=worker)
    thread.start()
    ready.wait(5)
    try:
        assert ndl.is_grad_enabled()
        x = ndl.Tensor([1.0])
        assert (x * 2).requires_grad
    finally:
        release.set()
        thread.join(5)


def test_lazy_mode_under_no_grad_computes_at_once():
    saved = needle.autograd.LAZY_MODE
    needle.autograd.LAZY_MODE = True
    try:
        with ndl.no_grad():
            y = ndl.Tensor([1.0]) * 2
        assert y.cached_data is not None and y.op is None
    finally:
        needle.autograd.LAZY_MODE = saved


def test_bare_decorators_work_like_called_ones(device):
    x = ndl.Tensor([1.0], device=device)

    @ndl.no_grad
    def evaluate(t):
        assert not ndl.is_grad_enabled()
        return t * 2

    @ndl.enable_grad
    def train_step(t):
        assert ndl.is_grad_enabled()
        return t * 2

    assert ndl.is_grad_enabled(), "decorating must not change the mode"
    assert evaluate(x).requires_grad is False
    assert evaluate.__name__ == "evaluate" and callable(evaluate)
    with ndl.no_grad():
        assert train_step(x).requires_grad is True
        assert not ndl.is_grad_enabled()
    assert evaluate(evaluate(x)).requires_grad is False
    assert ndl.is_grad_enabled()


def test_bare_decorator_restores_the_flag_after_an_exception():
    @ndl.no_grad
    def fails():
        raise ValueError("boom")

    with pytest.raises(ValueError):
        fails()
    assert ndl.is_grad_enabled()


@pytest.mark.parametrize("switch", [ndl.no_grad, ndl.enable_grad])
def test_a_non_callable_argument_says_how_to_use_the_switch(switch):
    with pytest.raises(TypeError, match=rf"{switch.__name__}\(\) takes no arguments, got int 3"):
        switch(3)
    assert ndl.is_grad_enabled()
