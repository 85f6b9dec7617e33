"""Tensor's Python operators and methods build the same ops as the functions, with gradients."""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from gradcheck import check_gradients

A = np.array([[0.5, -1.2, 2.0], [1.5, 0.3, -0.7]])
B = np.array([[1.1, 0.4, -0.9], [0.6, -1.3, 0.8]])
POSITIVE = np.array([[0.5, 1.2, 2.0], [1.5, 0.3, 0.7]])

OPERATOR_CASES = [
    ("add", lambda a, b: a + b, ops.EWiseAdd, A + B),
    ("add_scalar", lambda a, b: a + 2, ops.AddScalar, A + 2),
    ("radd", lambda a, b: 2 + a, ops.AddScalar, 2 + A),
    ("sub", lambda a, b: a - b, ops.EWiseAdd, A - B),
    ("sub_scalar", lambda a, b: a - 2, ops.AddScalar, A - 2),
    ("rsub", lambda a, b: 2 - a, ops.AddScalar, 2 - A),
    ("mul", lambda a, b: a * b, ops.EWiseMul, A * B),
    ("mul_scalar", lambda a, b: a * 3, ops.MulScalar, A * 3),
    ("rmul", lambda a, b: 3 * a, ops.MulScalar, 3 * A),
    ("div", lambda a, b: a / b, ops.EWiseDiv, A / B),
    ("div_scalar", lambda a, b: a / 4, ops.DivScalar, A / 4),
    ("rdiv", lambda a, b: 4 / b, None, 4 / B),
    ("pow_scalar", lambda a, b: a**2, ops.PowerScalar, A**2),
    ("neg", lambda a, b: -a, ops.Negate, -A),
    ("matmul_operator", lambda a, b: a @ b.transpose(), ops.MatMul, A @ B.T),
    ("matmul_method", lambda a, b: a.matmul(b.transpose()), ops.MatMul, A @ B.T),
    ("sum_method", lambda a, b: a.sum(), ops.Summation, A.sum()),
    ("sum_axes_method", lambda a, b: a.sum(axes=(1,)), ops.Summation, A.sum(axis=1)),
    ("reshape_method", lambda a, b: a.reshape((3, 2)), ops.Reshape, A.reshape(3, 2)),
    ("broadcast_to_method", lambda a, b: a.broadcast_to((4, 2, 3)), ops.BroadcastTo, np.broadcast_to(A, (4, 2, 3))),
    ("transpose_method", lambda a, b: a.transpose(), ops.Transpose, A.T),
    ("transpose_axes_method", lambda a, b: a.transpose((1, 0)), ops.Transpose, A.T),
    ("exp_method", lambda a, b: a.exp(), ops.Exp, np.exp(A)),
    ("tanh_method", lambda a, b: a.tanh(), ops.Tanh, np.tanh(A)),
]


@pytest.mark.parametrize(
    "expression, op_type, expected", [pytest.param(*case[1:], id=case[0]) for case in OPERATOR_CASES]
)
def test_operator_builds_the_op_and_matches_numpy(expression, op_type, expected, device):
    a = ndl.Tensor(A, device=device, dtype="float64")
    b = ndl.Tensor(B, device=device, dtype="float64")
    out = expression(a, b)
    assert isinstance(out, ndl.Tensor)
    if op_type is not None:
        assert isinstance(out.op, op_type)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize(
    "expression", [pytest.param(case[1], id=case[0]) for case in OPERATOR_CASES]
)
def test_operator_gradients(expression, device):
    check_gradients(expression, [A, B], device)


def test_pow_of_tensors_and_rpow(device):
    a = ndl.Tensor(POSITIVE, device=device, dtype="float64")
    b = ndl.Tensor(B, device=device, dtype="float64")
    np.testing.assert_allclose((a**b).numpy(), POSITIVE**B)
    np.testing.assert_allclose((2.0**b).numpy(), 2.0**B)
    check_gradients(lambda x, y: x**y + 2.0**y, [POSITIVE, B], device)


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param(lambda t: t * np.float64(2.0), id="tensor*np.float64"),
        pytest.param(lambda t: np.float64(2.0) * t, id="np.float64*tensor"),
        pytest.param(lambda t: np.float64(2.0) + t, id="np.float64+tensor"),
        pytest.param(lambda t: np.float64(2.0) - t, id="np.float64-tensor"),
        pytest.param(lambda t: t / np.float64(2.0), id="tensor/np.float64"),
        pytest.param(lambda t: t ** np.float64(2.0), id="tensor**np.float64"),
    ],
)
@pytest.mark.needle_backend("nd")  # asserts the float32 default
def test_numpy_float64_scalars_keep_float32_and_the_graph(expression, device):
    t = ndl.Tensor([1.0, 2.0], device=device)
    out = expression(t)
    assert isinstance(out, ndl.Tensor), f"got {type(out).__name__}: the graph was lost"
    assert out.dtype == np.float32
    assert out.inputs[0] is t or t in out.inputs or any(t is x for x in out.inputs[0].inputs)


def test_scalar_ops_refuse_an_array_operand(device):
    t = ndl.Tensor([1.0, 2.0], device=device)
    with pytest.raises(TypeError, match="MulScalar takes a Python number, got ndarray"):
        t * np.array([1.0, 2.0])
