"""conv against a loop-over-windows numpy reference; gradients and gradients of gradients by central differences.

Also the shape ops conv's gradient is written with: pad (including negative widths, which crop).
"""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from gradcheck import check_gradients
from test_second_order import second_order_check

rng = np.random.default_rng(14)


def reference_conv(x, w, stride, padding):
    """Cross-correlation, one output position at a time (slow and obviously right)."""
    x = np.pad(x, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
    kernel_h, kernel_w = w.shape[:2]
    rows = (x.shape[1] - kernel_h) // stride + 1
    cols = (x.shape[2] - kernel_w) // stride + 1
    out = np.zeros((x.shape[0], rows, cols, w.shape[3]))
    for i in range(rows):
        for j in range(cols):
            window = x[:, i * stride : i * stride + kernel_h, j * stride : j * stride + kernel_w, :]
            out[:, i, j, :] = np.einsum("nhwc,hwco->no", window, w)
    return out


# (input shape NHWC, kernel size, stride, padding): every kernel 1/3/5 with strides 1 and 2 and
# paddings 0-2, on sizes where the stride does and does not divide the input evenly, with few
# and with many channels (the two layouts of the im2col matrix).
CASES = [
    ((2, 5, 5, 2), 1, 1, 0),
    ((1, 5, 4, 2), 1, 2, 1),
    ((2, 4, 4, 1), 1, 1, 2),
    ((2, 5, 5, 2), 3, 1, 0),
    ((1, 5, 6, 2), 3, 1, 1),
    ((1, 6, 6, 2), 3, 2, 1),
    ((1, 5, 5, 2), 3, 2, 0),
    ((1, 4, 5, 1), 3, 2, 2),
    ((1, 5, 5, 1), 5, 1, 0),
    ((1, 4, 4, 2), 5, 1, 2),
    ((1, 6, 7, 1), 5, 2, 1),
    ((1, 7, 7, 1), 5, 2, 2),
    # kernel width x channels >= 16: im2col copies window rows (the cases above copy image rows)
    ((1, 4, 4, 8), 3, 1, 1),
    ((2, 5, 5, 6), 3, 2, 0),
    ((1, 5, 4, 4), 5, 2, 2),
]
CASE_IDS = [f"k{k}-s{s}-p{p}-{'x'.join(map(str, shape))}" for shape, k, s, p in CASES]


def inputs_for(shape, kernel, out_channels=3):
    return rng.normal(size=shape), rng.normal(size=(kernel, kernel, shape[3], out_channels))


@pytest.mark.parametrize("shape, kernel, stride, padding", CASES, ids=CASE_IDS)
def test_conv_forward_matches_reference(shape, kernel, stride, padding, device):
    x, w = inputs_for(shape, kernel)
    out = ops.conv(ndl.Tensor(x, device=device, dtype="float64"), ndl.Tensor(w, device=device, dtype="float64"),
                   stride=stride, padding=padding)
    assert out.device is device and out.dtype == np.float64
    np.testing.assert_allclose(out.numpy(), reference_conv(x, w, stride, padding), rtol=1e-12, atol=1e-12)


@pytest.mark.needle_backend("nd")  # asserts the float32 default
def test_conv_keeps_float32(device):
    x, w = inputs_for((2, 6, 6, 3), 3)
    out = ops.conv(ndl.Tensor(x, device=device), ndl.Tensor(w, device=device), stride=1, padding=1)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.numpy(), reference_conv(x, w, 1, 1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape, kernel, stride, padding", CASES, ids=CASE_IDS)
def test_conv_gradients_match_central_differences(shape, kernel, stride, padding, device):
    x, w = inputs_for(shape, kernel, out_channels=2)
    check_gradients(lambda a, b: ops.conv(a, b, stride=stride, padding=padding), [x, w], device)


def test_conv_gradient_of_strided_view_input(device):
    """A transposed (non-compact) input and weight give the same values and gradients."""
    x, w = rng.normal(size=(3, 5, 5, 1)), rng.normal(size=(2, 3, 3, 3))
    check_gradients(
        lambda a, b: ops.conv(ops.transpose(a, (0, 3)), ops.transpose(b, (0, 3)), stride=2, padding=1), [x, w], device
    )


@pytest.mark.parametrize(
    "stride, padding, wrt",
    [(1, 1, 0), (1, 1, 1), (2, 1, 0), (2, 0, 1)],
    ids=["s1-wrt-input", "s1-wrt-weight", "s2-wrt-input", "s2-wrt-weight"],
)
def test_conv_gradient_of_gradient(stride, padding, wrt, device):
    # conv is bilinear, so the second-order terms are the cross terms: d/dw of (dL/dx) and back.
    second_order_check(
        lambda a, b: ops.conv(a, b, stride=stride, padding=padding),
        [rng.normal(size=(1, 4, 5, 2)), rng.normal(size=(3, 3, 2, 2))],
        wrt,
        device,
    )


def test_conv_does_not_compute_a_gradient_nobody_needs(device):
    x = ndl.Tensor(rng.normal(size=(1, 4, 4, 2)), device=device, requires_grad=False)
    w = ndl.Tensor(rng.normal(size=(3, 3, 2, 2)), device=device)
    grad_x, grad_w = ops.conv(x, w).op.gradient(ndl.init.ones(1, 4, 4, 2, device=device), ops.conv(x, w))
    assert grad_x is None and grad_w.shape == (3, 3, 2, 2)


@pytest.mark.parametrize(
    "make, pattern",
    [
        pytest.param(lambda d: ops.conv(_ones((4, 4, 2), d), _ones((3, 3, 2, 1), d)), r"NHWC.*\(4, 4, 2\)", id="3d-input"),
        pytest.param(
            lambda d: ops.conv(_ones((1, 2, 4, 4), d), _ones((3, 3, 2, 1), d)), r"4 channels.*expects 2.*NCHW", id="nchw"
        ),
        pytest.param(lambda d: ops.conv(_ones((1, 2, 2, 1), d), _ones((5, 5, 1, 1), d), padding=0), r"does not fit", id="too-small"),
        pytest.param(lambda d: ops.conv(_ones((1, 4, 4, 1), d), _ones((3, 3, 1, 1), d), stride=0), r"stride=0", id="stride-0"),
        pytest.param(lambda d: ops.conv(_ones((1, 4, 4, 1), d), _ones((3, 3, 1, 1), d), padding=-1), r"padding=-1", id="padding"),
    ],
)
def test_conv_errors_name_the_problem(make, pattern, device):
    with pytest.raises(ValueError, match=pattern):
        make(device)


def _ones(shape, device):
    return ndl.Tensor(np.ones(shape), device=device)


PAD_CASES = [
    ("grow", ((1, 0), (2, 1))),
    ("crop", ((0, -1), (-1, -2))),
    ("grow-and-crop", ((-1, 2), (1, -1))),
]


def reference_pad(x, widths):
    crop = tuple(slice(max(-b, 0), x.shape[i] - max(-a, 0)) for i, (b, a) in enumerate(widths))
    return np.pad(x[crop], tuple((max(b, 0), max(a, 0)) for b, a in widths))


@pytest.mark.parametrize("widths", [w for _, w in PAD_CASES], ids=[name for name, _ in PAD_CASES])
def test_pad_forward_and_gradients(widths, device):
    x = rng.normal(size=(3, 4))
    out = ops.pad(ndl.Tensor(x, device=device, dtype="float64"), widths)
    np.testing.assert_array_equal(out.numpy(), reference_pad(x, widths))
    check_gradients(lambda a: ops.pad(a, widths), [x], device)
    second_order_check(lambda a: ops.pad(a, widths) * ops.pad(a, widths), [x], 0, device)


def test_pad_errors_name_the_widths(device):
    with pytest.raises(ValueError, match=r"one \(before, after\) pair per dimension"):
        ops.pad(_ones((2, 2), device), ((1, 1),))
    with pytest.raises(ValueError, match=r"remove more than"):
        ops.pad(_ones((2, 2), device), ((0, 0), (-2, -1)))
