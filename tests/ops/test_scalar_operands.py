"""Scalar ops take a Python number, a numpy scalar or a one-element array, and use its value."""
import numpy as np
import pytest

import needle as ndl
from needle import ops

pytestmark = pytest.mark.needle_backend("nd")  # asserts the float32 default

SCALAR_FUNCTIONS = [
    pytest.param(ops.add_scalar, lambda x, s: x + s, id="add_scalar"),
    pytest.param(ops.mul_scalar, lambda x, s: x * s, id="mul_scalar"),
    pytest.param(ops.divide_scalar, lambda x, s: x / s, id="divide_scalar"),
    pytest.param(ops.power_scalar, lambda x, s: x**s, id="power_scalar"),
]

ONE_ELEMENT = [
    pytest.param(lambda v: np.float32(v), id="np.float32"),
    pytest.param(lambda v: np.float64(v), id="np.float64"),
    pytest.param(lambda v: np.array(v), id="0-d array"),
    pytest.param(lambda v: np.array([v]), id="(1,) array"),
    pytest.param(lambda v: np.array([[v]], dtype=np.float32), id="(1, 1) float32 array"),
    pytest.param(lambda v: ndl.NDArray([v]), id="(1,) NDArray"),
]


@pytest.mark.parametrize("function, reference", SCALAR_FUNCTIONS)
@pytest.mark.parametrize("make_scalar", ONE_ELEMENT)
def test_scalar_functions_take_one_element_arrays(function, reference, make_scalar, device):
    data = np.array([1.0, 2.0, 4.0], dtype=np.float32)
    x = ndl.Tensor(data, device=device)
    out = function(x, make_scalar(2.0))
    assert out.shape == (3,) and out.dtype == np.float32, "the scalar's shape and dtype must not leak in"
    np.testing.assert_allclose(out.numpy(), reference(data, 2.0), rtol=1e-6)
    assert out.op.scalar == 2.0 and type(out.op.scalar) is float
    out.sum().backward()
    assert x.grad.shape == (3,)


def test_integer_one_element_arrays_give_python_ints(device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    op = ops.power_scalar(x, np.array([3], dtype=np.int64)).op
    assert op.scalar == 3 and type(op.scalar) is int
    np.testing.assert_array_equal((x ** np.array([3])).numpy(), [1.0, 8.0])


@pytest.mark.parametrize(
    "expression, expected",
    [
        pytest.param(lambda t, s: t + s, [3.0, 4.0], id="t+s"),
        pytest.param(lambda t, s: s + t, [3.0, 4.0], id="s+t"),
        pytest.param(lambda t, s: t - s, [-1.0, 0.0], id="t-s"),
        pytest.param(lambda t, s: s - t, [1.0, 0.0], id="s-t"),
        pytest.param(lambda t, s: t * s, [2.0, 4.0], id="t*s"),
        pytest.param(lambda t, s: s * t, [2.0, 4.0], id="s*t"),
        pytest.param(lambda t, s: t / s, [0.5, 1.0], id="t/s"),
        pytest.param(lambda t, s: s / t, [2.0, 1.0], id="s/t"),
        pytest.param(lambda t, s: t**s, [1.0, 4.0], id="t**s"),
    ],
)
def test_tensor_operators_take_one_element_arrays(expression, expected, device):
    t = ndl.Tensor([1.0, 2.0], device=device)
    out = expression(t, np.array([2.0]))
    assert isinstance(out, ndl.Tensor) and out.shape == (2,) and out.dtype == np.float32
    np.testing.assert_allclose(out.numpy(), expected)
    out.sum().backward()
    assert t.grad is not None and t.grad.shape == (2,)


@pytest.mark.parametrize("function, reference", SCALAR_FUNCTIONS)
def test_a_larger_array_still_gets_the_clear_error(function, reference, device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    name = {"add_scalar": "AddScalar", "mul_scalar": "MulScalar"}.get(function.__name__)
    name = name or {"divide_scalar": "DivScalar", "power_scalar": "PowerScalar"}[function.__name__]
    with pytest.raises(TypeError, match=rf"{name} takes a Python number, got ndarray of shape \(2,\)"):
        function(x, np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match=rf"{name} takes a Python number, got ndarray of shape \(0,\)"):
        function(x, np.array([]))


def test_one_element_arrays_that_hold_no_number_are_refused(device):
    x = ndl.Tensor([1.0], device=device)
    with pytest.raises(TypeError, match="MulScalar takes a Python number, got str"):
        x * np.array(["2"], dtype=object)
    with pytest.raises(TypeError, match="AddScalar takes a Python number, got complex"):
        x + np.array([1 + 2j])


def test_fused_add_scalars_takes_one_element_arrays(device):
    x = ndl.Tensor(np.array([1.0, 2.0], dtype=np.float32), device=device)
    first, second = ops.fused_add_scalars(x, np.float64(1.0), np.array([2.0]))
    assert first.dtype == np.float32 and second.shape == (2,)
    np.testing.assert_array_equal(second.numpy(), [3.0, 4.0])
    with pytest.raises(TypeError, match="FusedAddScalars takes a Python number"):
        ops.fused_add_scalars(x, np.ones(2), 1.0)
