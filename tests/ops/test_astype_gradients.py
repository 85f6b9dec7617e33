"""``AsType``'s gradient: converted back to the input's dtype, checked against central differences
on both backward paths (its second order is in test_second_order.py)."""
import numpy as np
import pytest
from gradcheck import check_gradients

import needle as ndl
from needle.ops.ops_mathematic import AsType, astype

rng = np.random.default_rng(11)


def test_same_dtype_conversion_has_the_identity_gradient(device):
    check_gradients(lambda a: astype(a, "float64") * astype(a * a, "float64"), [rng.normal(size=(3, 2))], device)


def test_gradient_through_a_float32_round_trip(device):
    # float32 in the middle: a wider step and tolerance than float64's
    check_gradients(lambda a, b: astype(astype(a, "float32") * astype(b, "float32"), "float64") * a,
                    [rng.uniform(0.5, 2, size=(4,)), rng.uniform(0.5, 2, size=(4,))], device,
                    rtol=1e-3, atol=1e-4, eps=1e-3)


@pytest.mark.parametrize("create_graph", [True, False])
@pytest.mark.parametrize("source, target", [("float32", "float64"), ("float64", "float32"), ("float16", "float32")])
def test_the_gradient_has_the_inputs_dtype_and_goes_through_astype(create_graph, source, target, device):
    x = ndl.Tensor(np.array([1.0, -2.0, 3.0], dtype=source), device=device, dtype=source, requires_grad=True)
    y = astype(x, target)
    assert y.dtype == np.dtype(target) and isinstance(y.op, AsType)
    (y * y * 3.0).sum().backward(create_graph=create_graph)
    assert x.grad.dtype == np.dtype(source)
    np.testing.assert_allclose(x.grad.numpy().astype(np.float64), [6.0, -12.0, 18.0], rtol=1e-3)
    if create_graph:
        assert x.grad.op is not None, "the gradient is a graph, to be differentiated again"


def test_the_op_returns_the_gradient_in_the_inputs_dtype_itself():
    x = ndl.Tensor(np.array([1.0, 2.0], np.float32), dtype="float32", requires_grad=True)
    y = astype(x, "float64")
    out_grad = ndl.Tensor(np.array([0.5, 0.25]), dtype="float64")
    (grad,) = y.op.gradient_as_tuple(out_grad, y)
    assert grad.dtype == np.float32 and grad.numpy().tolist() == [0.5, 0.25]
    (data,) = y.op.gradient_data(out_grad.realize_cached_data(), y)
    assert data.dtype == np.float32 and data.numpy().tolist() == [0.5, 0.25]


def test_an_integer_conversion_passes_no_gradient():
    x = ndl.Tensor(np.array([1.5, 2.5]), dtype="float64", requires_grad=True)
    loss = (astype(x, "int64") * 1.0).sum() + (x * 2.0).sum()  # the integer branch has no gradient
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])
