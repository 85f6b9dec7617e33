"""The course's finite-difference check over the op table, under both backends.

Written the way the course's tests check gradients: perturb each input element in place through
``tensor.realize_cached_data().flat[j] += eps``, re-run the function on the same Tensors, and
compare central differences of ``f(...).sum()`` with the ``.grad`` that ``backward`` leaves. It
only passes if ``flat`` writes through to the Tensor (a copy would give zero differences), and
under ``NEEDLE_BACKEND=np`` the Tensors keep numpy's float64, under ``nd`` they are float32.
"""
import numpy as np
import pytest

import needle as ndl
from needle import backend_selection
from test_op_table import CASES

# backend -> (dtype a Tensor of a float64 array gets, eps, rtol, atol)
SETTINGS = {"np": (np.float64, 1e-5, 1e-5, 1e-6), "nd": (np.float32, 1e-2, 2e-2, 5e-3)}


def course_gradient_check(f, *args, eps, rtol, atol):
    """Central differences through ``realize_cached_data().flat``, against ``backward``'s ``.grad``."""
    numerical = [np.zeros(a.shape) for a in args]
    for i, arg in enumerate(args):
        for j in range(arg.realize_cached_data().size):
            arg.realize_cached_data().flat[j] += eps
            f1 = float(f(*args).numpy().sum())
            arg.realize_cached_data().flat[j] -= 2 * eps
            f2 = float(f(*args).numpy().sum())
            arg.realize_cached_data().flat[j] += eps
            numerical[i].flat[j] = (f1 - f2) / (2 * eps)
    f(*args).sum().backward()
    for i, arg in enumerate(args):
        got = np.zeros(arg.shape) if arg.grad is None else arg.grad.numpy()
        np.testing.assert_allclose(got, numerical[i], rtol=rtol, atol=atol, err_msg=f"input {i}")


@pytest.mark.parametrize("backend", ["np", "nd"])
@pytest.mark.parametrize("fn, inputs", [pytest.param(fn, inputs, id=name) for name, fn, _, inputs in CASES])
def test_course_style_gradient_check(fn, inputs, backend, device):
    dtype, eps, rtol, atol = SETTINGS[backend]
    with backend_selection.use_backend(backend):
        args = [ndl.Tensor(x, device=device) for x in inputs]
        assert all(a.dtype == dtype for a in args)
        course_gradient_check(fn, *args, eps=eps, rtol=rtol, atol=atol)


class DoubledExpGradient(ndl.TensorOp):
    """exp(a) with a gradient twice too large: the check must refuse it."""

    def compute(self, a):
        return a.exp()

    def gradient(self, out_grad, node):
        return out_grad * node * 2.0


@pytest.mark.parametrize("backend", ["np", "nd"])
def test_the_course_check_catches_a_wrong_gradient(backend):
    _, eps, rtol, atol = SETTINGS[backend]
    with backend_selection.use_backend(backend):
        x = ndl.Tensor(np.linspace(-1.0, 1.0, 6).reshape(2, 3))
        with pytest.raises(AssertionError, match="input 0"):
            course_gradient_check(lambda a: DoubledExpGradient()(a), x, eps=eps, rtol=rtol, atol=atol)
