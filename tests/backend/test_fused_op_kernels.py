"""The one-pass C pieces of the loss and of ReLU's backward (needle/backend_ndarray/_fused_ops.c).

Each accepted call must equal the numpy calls it replaces bit for bit (float32 and float64, labels
of every integer width, NaN, infinities and signed zeros among the values); each array it does
not take must be refused with False and left as it was, so that the numpy calls run instead.
CI sets ``NEEDLE_REQUIRE_C_EXTENSIONS=1``: there the extension must have been built, so these
checks cannot pass by skipping.
"""
import os

import numpy as np
import pytest

import needle as ndl
from needle.backend_ndarray import fused_ops
from needle.backend_ndarray.kernels import ArrayRoutines

built = pytest.mark.skipif(not fused_ops.ENABLED, reason=f"the loss's pieces are {fused_ops.describe()}")
LABEL_DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64, np.intp]
SHAPES = [(1, 1), (32, 10), (7, 1000), (3, 2)]


def bits(array):
    array = np.ascontiguousarray(array)
    return array.view(np.uint32 if array.dtype == np.float32 else np.uint64)


def same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(bits(a), bits(b))


def logits_with_specials(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal(shape) * 30).astype(dtype)
    if shape[0] >= 3 and shape[1] >= 2:
        logits[0, 0] = np.nan
        logits[1, :] = -np.inf
        logits[2, 0], logits[2, 1] = -0.0, 0.0
    return logits


def test_ci_builds_the_extension():
    if os.environ.get("NEEDLE_REQUIRE_C_EXTENSIONS") != "1":
        pytest.skip("only where NEEDLE_REQUIRE_C_EXTENSIONS=1 (CI)")
    assert fused_ops.ENABLED, fused_ops.describe()
    assert ndl.cpu().kernels._fused_relu_backward is fused_ops.relu_backward


@built
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_shift_rows_is_the_numpy_calls(shape, dtype):
    logits = logits_with_specials(shape, dtype, 0)
    shifted = np.empty_like(logits)
    with np.errstate(invalid="ignore"):
        expected = logits - logits.max(axis=1, keepdims=True)
    assert fused_ops.shift_rows(shifted, logits) is True
    assert np.array_equal(shifted, expected, equal_nan=True)
    # a signed zero only where the row's largest value is a zero, which exp and the loss read alike
    mismatch = bits(shifted) != bits(expected)
    assert np.all(shifted[mismatch] == 0) and np.all(expected[mismatch] == 0)


@built
@pytest.mark.parametrize("label_dtype", LABEL_DTYPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_take_labels_and_the_gradient_are_the_numpy_calls(shape, dtype, label_dtype):
    rng = np.random.default_rng(1)
    batch, classes = shape
    shifted = logits_with_specials(shape, dtype, 2)
    labels = rng.integers(0, min(classes, np.iinfo(label_dtype).max + 1), batch).astype(label_dtype)
    losses = rng.standard_normal(batch).astype(dtype)
    expected = losses.copy()
    expected -= shifted[np.arange(batch), labels]
    assert fused_ops.take_labels(losses, shifted, labels) is True
    assert same_bits(losses, expected)

    exp_shifted = np.abs(rng.standard_normal(shape)).astype(dtype)
    totals = exp_shifted.sum(axis=1)
    scale = np.asarray(0.9 / batch, dtype=dtype)  # a 0-d array of the values' type (numpy 1 would make float64 of a division)
    expected = exp_shifted.copy()
    expected *= scale / totals.reshape(batch, 1)
    expected[np.arange(batch), labels] -= scale
    assert fused_ops.cross_entropy_gradient(exp_shifted, totals, labels, scale) is True
    assert same_bits(exp_shifted, expected)


@built
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1,), (32, 128), (2, 3, 5)])
def test_relu_backward_is_the_numpy_calls(shape, dtype):
    rng = np.random.default_rng(3)
    gradient = rng.standard_normal(shape).astype(dtype)
    out = np.maximum(rng.standard_normal(shape), 0).astype(dtype)
    flat_g, flat_o = gradient.reshape(-1), out.reshape(-1)
    if flat_g.size >= 4:
        flat_g[:4] = [np.inf, np.nan, -np.inf, -1.0]
        flat_o[:4] = [0.0, 1.0, 0.0, -0.0]
    result = np.empty_like(gradient)
    with np.errstate(invalid="ignore"):
        expected = gradient * (out > 0)
    assert fused_ops.relu_backward(result, gradient, out) is True
    assert same_bits(result, expected)


@built
def test_arrays_it_does_not_take_are_refused_and_left_unchanged():
    logits = np.arange(12, dtype=np.float32).reshape(3, 4)
    losses, totals = np.ones(3, np.float32), np.full(3, 2.0, np.float32)
    scale = np.asarray(0.5, np.float32)
    cases = {
        "a label out of range": (fused_ops.take_labels, (losses, logits, np.array([0, 4, 1], np.uint8))),
        "a negative label": (fused_ops.take_labels, (losses, logits, np.array([0, -1, 1], np.int64))),
        "float labels": (fused_ops.take_labels, (losses, logits, np.array([0.0, 1.0, 1.0]))),
        "another float type": (fused_ops.take_labels, (losses.astype(np.float64), logits, np.array([0, 1, 2]))),
        "a gradient label out of range": (
            fused_ops.cross_entropy_gradient, (logits, totals, np.array([0, 1, 9]), scale)),
        "a scale of another float type": (
            fused_ops.cross_entropy_gradient, (logits, totals, np.array([0, 1, 2]), np.asarray(0.5, np.float64))),
        "a scale of several values": (
            fused_ops.cross_entropy_gradient, (logits, totals, np.array([0, 1, 2]), np.ones(2, np.float32))),
        "a gradient of another shape": (
            fused_ops.relu_backward, (np.empty((3, 4), np.float32), np.ones((4, 3), np.float32), logits)),
        "integer arrays": (fused_ops.relu_backward, (np.empty((3, 4), np.int64), np.ones((3, 4), np.int64), logits)),
        "a strided view": (fused_ops.shift_rows, (np.empty((3, 2), np.float32), logits[:, ::2])),
        "no classes": (fused_ops.shift_rows, (np.empty((3, 0), np.float32), np.empty((3, 0), np.float32))),
        "an output sharing the input": (fused_ops.shift_rows, (logits, logits)),
        "a read-only output": (fused_ops.shift_rows, (np.broadcast_to(np.float32(0), (3, 4)), logits)),
    }
    for what, (kernel, args) in cases.items():
        before = [np.array(a, copy=True) for a in args]
        assert kernel(*args) is False, what
        for was, now in zip(before, args):
            assert np.array_equal(was, now, equal_nan=True), f"{what}: an argument changed"


def numpy_only():
    kernels = ArrayRoutines(np)
    kernels._fused_shift_rows = kernels._fused_take_labels = None
    kernels._fused_cross_entropy_gradient = kernels._fused_relu_backward = None
    return kernels


@built
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_routines_give_the_numpy_routines_values(dtype):
    rng = np.random.default_rng(4)
    logits = (rng.standard_normal((32, 10)) * 5).astype(dtype)
    labels = rng.integers(0, 10, 32).astype(np.uint8)
    out_grad = np.asarray(1.0, dtype=dtype)
    fused, plain = ArrayRoutines(np), numpy_only()
    loss, saved = fused.softmax_cross_entropy(logits, labels)
    loss_numpy, saved_numpy = plain.softmax_cross_entropy(logits, labels)
    assert same_bits(np.asarray(loss), np.asarray(loss_numpy))
    assert same_bits(saved.exp_shifted, saved_numpy.exp_shifted) and same_bits(saved.totals, saved_numpy.totals)
    gradient = fused.softmax_cross_entropy_gradient(saved, out_grad)
    assert same_bits(gradient, plain.softmax_cross_entropy_gradient(saved_numpy, out_grad))
    hidden = np.maximum(rng.standard_normal((32, 16)), 0).astype(dtype)
    upstream = rng.standard_normal((32, 16)).astype(dtype)
    assert same_bits(fused.relu_backward(upstream, hidden), plain.relu_backward(upstream, hidden))


def test_an_out_of_range_label_still_raises_the_ops_error():
    logits = ndl.Tensor(np.zeros((2, 3), dtype=np.float32), requires_grad=True)
    with pytest.raises(IndexError, match="label 3 .* out of range for 3 classes"):
        ndl.ops.softmax_cross_entropy(logits, ndl.Tensor(np.array([0, 3], dtype=np.uint8)))
