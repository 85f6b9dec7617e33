"""Every op from one table: forward against numpy, backward against float64 central differences.

Each case is ``(needle function of Tensors, numpy reference of arrays, input arrays)``. Inputs keep
off kinks: ReLU samples stay away from 0, log/pow/sqrt bases are positive, divisors away from 0.
The gradient checker runs both backward paths (``create_graph`` True and False).
"""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from gradcheck import check_gradients

rng = np.random.default_rng(0)


def normal(*shape):
    return rng.normal(size=shape)


def positive(*shape):
    return rng.uniform(0.5, 2.0, size=shape)


def off_zero(*shape):
    """Magnitudes in [0.2, 1.5] with random signs: no sample near a kink at 0."""
    return rng.uniform(0.2, 1.5, size=shape) * rng.choice([-1.0, 1.0], size=shape)


def np_logsumexp(x, axes=None):
    top = np.max(x, axis=axes, keepdims=True)
    return np.squeeze(np.log(np.sum(np.exp(x - top), axis=axes, keepdims=True)) + top, axis=axes)


def np_dilate(x, axes, dilation):
    shape = list(x.shape)
    index = [slice(None)] * x.ndim
    for axis in axes:
        shape[axis] *= dilation + 1
        index[axis] = slice(None, None, dilation + 1)
    out = np.zeros(shape, dtype=x.dtype)
    out[tuple(index)] = x
    return out


def np_undilate(x, axes, dilation):
    index = [slice(None)] * x.ndim
    for axis in axes:
        index[axis] = slice(None, None, dilation + 1)
    return x[tuple(index)]


LABELS = np.array([2, 0, 4, 1])


def labels_like(t):
    return ndl.Tensor(LABELS, device=t.device, dtype="int64", requires_grad=False)


def np_softmax_cross_entropy(z):
    return np.mean(np_logsumexp(z, axes=1) - z[np.arange(len(LABELS)), LABELS])


def split_weighted(t, axis):
    """Weight the pieces of ``split`` differently so that each one's gradient is checked."""
    pieces = ops.split(t, axis)
    total = pieces[0]
    for i in range(1, len(pieces)):
        total = total + pieces[i] * float(i + 1)
    return total


def np_split_weighted(x, axis):
    pieces = np.moveaxis(x, axis, 0)
    return sum(piece * float(i + 1) for i, piece in enumerate(pieces))


def tuple_get_item_unfolded(a, b):
    """``TupleGetItem`` nodes over a real ``MakeTensorTuple`` node (no constant folding)."""
    pair = ops.make_tuple(a, b)
    return ops.TupleGetItem(0)(pair, fold_const=False) * ops.TupleGetItem(1)(pair, fold_const=False)


def tuple_get_item_folded(a, b):
    pair = ops.make_tuple(a, b)
    return ops.tuple_get_item(pair, 1) * 2.0 - ops.tuple_get_item(pair, 0)


def fused_pair_product(a):
    pair = ops.fused_add_scalars(a, 1.5, -2.0)
    return pair[0] * pair[1]


CASES = [
    # name, needle function, numpy reference, inputs
    ("add", ops.add, np.add, [normal(3, 4), normal(3, 4)]),
    ("add_broadcast_row", ops.add, np.add, [normal(3, 4), normal(4)]),
    ("add_broadcast_both", ops.add, np.add, [normal(2, 1, 3), normal(4, 1)]),
    ("add_scalar", lambda a: ops.add_scalar(a, 1.5), lambda a: a + 1.5, [normal(3, 4)]),
    ("multiply", ops.multiply, np.multiply, [normal(3, 4), normal(3, 4)]),
    ("multiply_broadcast", ops.multiply, np.multiply, [normal(3, 1), normal(1, 4)]),
    ("mul_scalar", lambda a: ops.mul_scalar(a, -2.5), lambda a: a * -2.5, [normal(2, 3)]),
    ("power", ops.power, np.power, [positive(3, 4), normal(3, 4)]),
    ("power_broadcast", ops.power, np.power, [positive(3, 4), normal(4)]),
    ("power_scalar_int", lambda a: ops.power_scalar(a, 3), lambda a: a**3, [normal(3, 4)]),
    ("power_scalar_half", lambda a: ops.power_scalar(a, 0.5), np.sqrt, [positive(3, 4)]),
    ("power_scalar_negative", lambda a: ops.power_scalar(a, -2), lambda a: a**-2.0, [positive(3, 4)]),
    ("divide", ops.divide, np.divide, [normal(3, 4), off_zero(3, 4)]),
    ("divide_broadcast", ops.divide, np.divide, [normal(2, 3, 4), off_zero(3, 1)]),
    ("divide_scalar", lambda a: ops.divide_scalar(a, 4.0), lambda a: a / 4.0, [normal(3, 4)]),
    ("negate", ops.negate, np.negative, [normal(3, 4)]),
    ("transpose_default_2d", ops.transpose, np.transpose, [normal(3, 4)]),
    ("transpose_default_3d", ops.transpose, lambda a: np.swapaxes(a, -1, -2), [normal(2, 3, 4)]),
    ("transpose_axes", lambda a: ops.transpose(a, (0, 2)), lambda a: np.swapaxes(a, 0, 2), [normal(2, 3, 4)]),
    ("reshape", lambda a: ops.reshape(a, (3, 4)), lambda a: a.reshape(3, 4), [normal(2, 6)]),
    ("reshape_infer", lambda a: ops.reshape(a, (-1, 2)), lambda a: a.reshape(-1, 2), [normal(2, 3, 2)]),
    ("broadcast_to_new_axes", lambda a: ops.broadcast_to(a, (2, 3, 4)), lambda a: np.broadcast_to(a, (2, 3, 4)), [normal(3, 1)]),
    ("broadcast_to_row", lambda a: ops.broadcast_to(a, (3, 4)), lambda a: np.broadcast_to(a, (3, 4)), [normal(4)]),
    ("broadcast_to_scalar", lambda a: ops.broadcast_to(a, (2, 3)), lambda a: np.broadcast_to(a, (2, 3)), [normal(1, 1)]),
    ("summation_all", ops.summation, np.sum, [normal(2, 3, 4)]),
    ("summation_int", lambda a: ops.summation(a, 1), lambda a: a.sum(axis=1), [normal(2, 3, 4)]),
    ("summation_negative_int", lambda a: ops.summation(a, -1), lambda a: a.sum(axis=-1), [normal(2, 3, 4)]),
    ("summation_tuple", lambda a: ops.summation(a, (0, 2)), lambda a: a.sum(axis=(0, 2)), [normal(2, 3, 4)]),
    ("matmul", ops.matmul, np.matmul, [normal(3, 4), normal(4, 5)]),
    ("matmul_batched", ops.matmul, np.matmul, [normal(2, 3, 4), normal(2, 4, 5)]),
    ("matmul_broadcast_right", ops.matmul, np.matmul, [normal(2, 3, 4), normal(4, 5)]),
    ("matmul_broadcast_left", ops.matmul, np.matmul, [normal(3, 4), normal(2, 4, 2)]),
    ("matmul_broadcast_batch", ops.matmul, np.matmul, [normal(2, 1, 3, 4), normal(3, 4, 2)]),
    ("matmul_transpose_a", lambda a, b: ops.MatMul(True, False)(a, b), lambda a, b: a.T @ b, [normal(4, 3), normal(4, 5)]),
    ("matmul_transpose_b", lambda a, b: ops.MatMul(False, True)(a, b), lambda a, b: a @ b.T, [normal(3, 4), normal(5, 4)]),
    ("matmul_transpose_both", lambda a, b: ops.MatMul(True, True)(a, b), lambda a, b: a.T @ b.T, [normal(4, 3), normal(5, 4)]),
    (
        "matmul_transpose_batched",
        lambda a, b: ops.MatMul(True, True)(a, b),
        lambda a, b: np.swapaxes(a, -1, -2) @ np.swapaxes(b, -1, -2),
        [normal(2, 4, 3), normal(5, 4)],
    ),
    ("sum_to_shape_row", lambda a: ops.sum_to_shape(a, (1, 4)), lambda a: a.sum(axis=0, keepdims=True), [normal(3, 4)]),
    ("sum_to_shape_leading", lambda a: ops.sum_to_shape(a, (3, 1)), lambda a: a.sum(axis=(0, 2))[:, None], [normal(2, 3, 4)]),
    ("log", ops.log, np.log, [positive(3, 4)]),
    ("exp", ops.exp, np.exp, [normal(3, 4)]),
    ("relu", ops.relu, lambda a: np.maximum(a, 0), [off_zero(3, 4)]),
    ("tanh", ops.tanh, np.tanh, [normal(3, 4)]),
    ("sigmoid", ops.sigmoid, lambda a: 1 / (1 + np.exp(-a)), [normal(3, 4)]),
    ("logsoftmax", ops.logsoftmax, lambda a: a - np_logsumexp(a, axes=1)[:, None], [normal(3, 5)]),
    ("logsoftmax_axis0", lambda a: ops.logsoftmax(a, axis=0), lambda a: a - np_logsumexp(a, axes=0)[None], [normal(3, 5)]),
    ("logsumexp_all", ops.logsumexp, np_logsumexp, [normal(3, 4)]),
    ("logsumexp_int", lambda a: ops.logsumexp(a, 1), lambda a: np_logsumexp(a, 1), [normal(3, 4)]),
    ("logsumexp_tuple", lambda a: ops.logsumexp(a, (0, 2)), lambda a: np_logsumexp(a, (0, 2)), [normal(2, 3, 4)]),
    ("stack_axis0", lambda a, b, c: ops.stack([a, b, c], 0), lambda a, b, c: np.stack([a, b, c], 0), [normal(2, 3), normal(2, 3), normal(2, 3)]),
    ("stack_axis2", lambda a, b: ops.stack([a, b], 2), lambda a, b: np.stack([a, b], 2), [normal(2, 3), normal(2, 3)]),
    ("split_axis1", lambda a: split_weighted(a, 1), lambda a: np_split_weighted(a, 1), [normal(2, 3, 2)]),
    ("split_axis0", lambda a: split_weighted(a, 0), lambda a: np_split_weighted(a, 0), [normal(3, 4)]),
    ("flip_one_axis", lambda a: ops.flip(a, (0,)), lambda a: np.flip(a, (0,)), [normal(3, 4)]),
    ("flip_two_axes", lambda a: ops.flip(a, (0, 2)), lambda a: np.flip(a, (0, 2)), [normal(2, 3, 4)]),
    ("dilate", lambda a: ops.dilate(a, (0,), 2), lambda a: np_dilate(a, (0,), 2), [normal(2, 3)]),
    ("dilate_two_axes", lambda a: ops.dilate(a, (0, 1), 1), lambda a: np_dilate(a, (0, 1), 1), [normal(2, 3)]),
    ("undilate", lambda a: ops.undilate(a, (1,), 1), lambda a: np_undilate(a, (1,), 1), [normal(2, 6)]),
    ("make_tuple_get_item", tuple_get_item_unfolded, np.multiply, [normal(3, 2), normal(3, 2)]),
    ("tuple_get_item_folded", tuple_get_item_folded, lambda a, b: b * 2.0 - a, [normal(3), normal(3)]),
    ("fused_add_scalars", fused_pair_product, lambda a: (a + 1.5) * (a - 2.0), [normal(2, 3)]),
    ("linear", ops.linear, lambda x, w, b: x @ w + b, [normal(4, 3), normal(3, 2), normal(1, 2)]),
    ("linear_no_bias", ops.linear, np.matmul, [normal(4, 3), normal(3, 2)]),
    ("linear_batched_input", ops.linear, lambda x, w, b: x @ w + b, [normal(2, 3, 3), normal(3, 2), normal(2)]),
    ("softmax_cross_entropy", lambda z: ops.softmax_cross_entropy(z, labels_like(z)), np_softmax_cross_entropy, [normal(4, 5)]),
]

CASE_PARAMS = [pytest.param(fn, ref, inputs, id=name) for name, fn, ref, inputs in CASES]


@pytest.mark.parametrize("fn, reference, inputs", CASE_PARAMS)
def test_forward_matches_numpy_in_float64(fn, reference, inputs, device):
    tensors = [ndl.Tensor(x, device=device, dtype="float64") for x in inputs]
    out = fn(*tensors)
    assert isinstance(out, ndl.Tensor)
    assert out.dtype == np.float64
    assert out.device is device
    np.testing.assert_allclose(out.numpy(), reference(*inputs), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fn, reference, inputs", CASE_PARAMS)
def test_forward_keeps_float32(fn, reference, inputs, device):
    tensors = [ndl.Tensor(x.astype(np.float32), device=device) for x in inputs]
    out = fn(*tensors)
    assert out.dtype == np.float32, "a float32 op result was silently upcast"
    np.testing.assert_allclose(out.numpy(), reference(*inputs), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fn, reference, inputs", CASE_PARAMS)
def test_backward_matches_central_differences(fn, reference, inputs, device):
    check_gradients(fn, inputs, device)
