"""2-D convolution (the course's ``conv``): a strided im2col view and one matrix product.

Layouts are the course's: input NHWC ``(N, H, W, C_in)``, weight ``(K, K, C_in, C_out)``,
output NHWC. Like PyTorch's ``Conv2d`` this is a cross-correlation (the kernel is not flipped).
The gradient is written with ``dilate``, ``pad``, ``flip``, ``transpose`` and ``conv`` itself,
so the gradient of a gradient is a graph too.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..autograd import TensorOp
from ..backend_ndarray import NDArray
from .ops_shape import dilate, flip, pad, transpose

if TYPE_CHECKING:
    from ..tensor import Tensor


def _check_int(value, name, minimum):
    if isinstance(value, bool) or int(value) != value or value < minimum:
        raise ValueError(f"Conv: {name} must be an int >= {minimum}, got {name}={value!r}")
    return int(value)


def output_size(size: int, kernel: int, stride: int, padding: int) -> int:
    """Rows (or columns) of a convolution's output: ``(size + 2 * padding - kernel) // stride + 1``."""
    return (size + 2 * padding - kernel) // stride + 1


# Elements in a window's row (kernel width x channels) below which im2col copies image rows instead.
_SHORTEST_FAST_RUN = 16


class Conv(TensorOp):
    """Convolve NHWC ``a`` with ``b`` of shape ``(KH, KW, C_in, C_out)``."""

    def __init__(self, stride: int = 1, padding: int = 0):
        self.stride = _check_int(stride, "stride", 1)
        self.padding = _check_int(padding, "padding", 0)

    def compute(self, a: NDArray, b: NDArray):
        if a.ndim != 4 or b.ndim != 4:
            raise ValueError(
                f"Conv needs an NHWC input and a (K, K, C_in, C_out) weight, got shapes {a.shape} and {b.shape}: "
                "a batch of one image is (1, H, W, C)"
            )
        kernel_h, kernel_w, in_channels, out_channels = b.shape
        if a.shape[3] != in_channels:
            raise ValueError(
                f"Conv: the input {a.shape} has {a.shape[3]} channels (last axis) but the weight {b.shape} "
                f"expects {in_channels} (its third axis); NCHW input must be transposed to NHWC first"
            )
        stride, padding = self.stride, self.padding
        rows = output_size(a.shape[1], kernel_h, stride, padding)
        cols = output_size(a.shape[2], kernel_w, stride, padding)
        if rows < 1 or cols < 1:
            raise ValueError(
                f"Conv: a {kernel_h}x{kernel_w} kernel does not fit the input {a.shape} with padding={padding}"
            )
        matrix = _im2col(a, kernel_h, kernel_w, stride, padding, rows, cols)
        out = matrix @ b.reshape((kernel_h * kernel_w * in_channels, out_channels))
        return out.reshape((a.shape[0], rows, cols, out_channels))

    def gradient(self, out_grad, node):
        a, b = node.inputs
        stride, padding = self.stride, self.padding
        kernel_h, kernel_w = b.shape[:2]
        # Rows/columns at the far edge that no window reached (when the stride does not divide evenly).
        leftover_h = (a.shape[1] + 2 * padding - kernel_h) % stride
        leftover_w = (a.shape[2] + 2 * padding - kernel_w) % stride
        # NOTE: dilate puts stride - 1 zeros after every element, the last included; those trailing
        # zeros are cut below, so the spread gradient covers exactly the positions windows start at.
        spread = dilate(out_grad, (1, 2), stride - 1) if stride > 1 else out_grad
        grad_a = grad_b = None
        if a.requires_grad:
            # Full correlation with the flipped kernel, then crop the forward's padding: one pad
            # (negative widths crop) and a stride-1 conv with input and output channels swapped.
            edge_h, edge_w = kernel_h - 1 - padding, kernel_w - 1 - padding
            after_h = edge_h + leftover_h - (stride - 1)
            after_w = edge_w + leftover_w - (stride - 1)
            widened = _pad_if_needed(spread, ((0, 0), (edge_h, after_h), (edge_w, after_w), (0, 0)))
            grad_a = conv(widened, transpose(flip(b, (0, 1)), (2, 3)), stride=1, padding=0)
        if b.requires_grad:
            # The batch becomes the channels: (C_in, H, W, N) convolved with (H_out', W_out', N, C_out).
            images = transpose(a, (0, 3))
            kernel = transpose(transpose(spread, (0, 1)), (1, 2))
            kernel = _pad_if_needed(kernel, ((0, 1 - stride), (0, 1 - stride), (0, 0), (0, 0)))
            grad_b = conv(images, kernel, stride=1, padding=padding)
            grad_b = _pad_if_needed(grad_b, ((0, 0), (0, -leftover_h), (0, -leftover_w), (0, 0)))
            grad_b = transpose(transpose(grad_b, (0, 1)), (1, 2))
        return grad_a, grad_b

    def gradient_data(self, out_grad, node):
        # The training path (backward(create_graph=False)): the same gradients in array code
        # that skips the zeros dilate would put between strided positions. The weight's is
        # im2col(a).T @ G; the input's is G @ W.T, each kernel offset's share added back (col2im).
        a, b = node.inputs
        images, weight = a.cached_data, b.cached_data
        stride, padding = self.stride, self.padding
        batch, rows, cols, out_channels = out_grad.shape
        kernel_h, kernel_w, in_channels, _ = weight.shape
        grad = out_grad.reshape((batch * rows * cols, out_channels))
        weight_matrix = weight.reshape((kernel_h * kernel_w * in_channels, out_channels))
        grad_a = grad_b = None
        if b.requires_grad:
            matrix = _im2col(images, kernel_h, kernel_w, stride, padding, rows, cols)
            grad_b = (matrix.permute((1, 0)) @ grad).reshape(weight.shape)
        if a.requires_grad:
            pieces = grad @ weight_matrix.permute((1, 0))
            pieces = pieces.reshape((batch, rows, cols, kernel_h, kernel_w, in_channels))
            height, width = images.shape[1] + 2 * padding, images.shape[2] + 2 * padding
            device = images.device
            padded = device.zeros(batch, height, width, in_channels, dtype=images.dtype)
            for i in range(kernel_h):
                for j in range(kernel_w):
                    every = slice(None)
                    window = (every, slice(i, i + stride * rows, stride), slice(j, j + stride * cols, stride), every)
                    padded[window] = padded[window] + pieces[:, :, :, i, j, :]
            grad_a = padded[:, padding : height - padding, padding : width - padding, :].compact()
        return grad_a, grad_b


def _im2col(a: NDArray, kernel_h: int, kernel_w: int, stride: int, padding: int, rows: int, cols: int) -> NDArray:
    """The (N * rows * cols, KH * KW * C) matrix of every window of the zero-padded NHWC ``a``."""
    if padding:
        a = a.pad(((0, 0), (padding, padding), (padding, padding), (0, 0)))
    batch_stride, row_stride, col_stride, channel_stride = a.strides
    batch, channels = a.shape[0], a.shape[3]
    # NOTE: the view repeats each input element once per window that covers it; the reshape is
    # the one copy (the im2col matrix), then one matrix product does the arithmetic.
    if kernel_w * channels >= _SHORTEST_FAST_RUN:
        windows = a.as_strided(
            (batch, rows, cols, kernel_h, kernel_w, channels),
            (batch_stride, row_stride * stride, col_stride * stride, row_stride, col_stride, channel_stride),
        )
        return windows.reshape((batch * rows * cols, kernel_h * kernel_w * channels))
    # Few channels (a first layer on images): a window row is too short to copy quickly, so the
    # matrix is built transposed, copying image rows instead, and handed back as its transpose.
    windows = a.as_strided(
        (kernel_h, kernel_w, channels, batch, rows, cols),
        (row_stride, col_stride, channel_stride, batch_stride, row_stride * stride, col_stride * stride),
    )
    return windows.reshape((kernel_h * kernel_w * channels, batch * rows * cols)).permute((1, 0))


def _pad_if_needed(x, widths):
    return pad(x, widths) if any(before or after for before, after in widths) else x


def conv(a: Tensor, b: Tensor, stride: int = 1, padding: int = 1) -> Tensor:
    """Convolve a batch of NHWC images ``a`` with the kernel ``b`` (course semantics).

    Args:
        a: input of shape ``(N, H, W, C_in)``.
        b: weight of shape ``(K, K, C_in, C_out)``.
        stride: step between windows, in both directions.
        padding: zeros added on each side of H and W.

    Returns:
        A Tensor of shape ``(N, (H + 2p - K) // stride + 1, (W + 2p - K) // stride + 1, C_out)``.

    Example:
        >>> import numpy as np, needle as ndl
        >>> x = ndl.Tensor(np.ones((1, 4, 4, 1)))
        >>> w = ndl.Tensor(np.ones((3, 3, 1, 2)))
        >>> y = ndl.ops.conv(x, w, stride=1, padding=1)
        >>> y.shape, y.numpy()[0, :, :, 0].tolist()[0]
        ((1, 4, 4, 2), [4.0, 6.0, 6.0, 4.0])
        >>> ndl.ops.conv(x, w, stride=2, padding=0).shape
        (1, 1, 1, 2)
    """
    return Conv(stride, padding)(a, b)
