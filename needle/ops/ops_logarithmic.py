"""Log-domain reductions: LogSumExp and LogSoftmax, stable for inputs of any magnitude."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ..autograd import TensorOp
from .. import backend_ndarray as array_api
from ..backend_ndarray import NDArray
from ._shapes import as_axes, normalize_axes
from .ops_mathematic import exp
from .ops_shape import broadcast_to, reshape, summation

if TYPE_CHECKING:
    from ..tensor import Tensor


def _stable_max(z: NDArray, axes):
    """The max over ``axes`` (kept as size-1 axes), with non-finite maxima replaced by 0."""
    top = z.max(axis=axes, keepdims=True)
    # NOTE: a row of all -inf (or +inf) would give inf - inf = nan; shifting by 0 avoids that.
    return array_api.where(top.isfinite(), top, 0).astype(z.dtype, copy=False)


class LogSumExp(TensorOp):
    """log(sum(exp(z))) over ``axes``, computed as max + log(sum(exp(z - max)))."""

    def __init__(self, axes=None):
        self.axes = as_axes(axes, "LogSumExp")

    def compute(self, z: NDArray):
        axes = normalize_axes(self.axes, z.ndim, "LogSumExp")
        top = _stable_max(z, axes)
        total = (z - top).exp().sum(axis=axes, keepdims=True)
        result = total.log() + top
        return result.reshape(_reduced_shape(z.shape, axes))

    # NOTE: the gradient is softmax(z) over ``axes``, computed from z shifted by its max, never
    # as exp(z - logsumexp(z)): in float32, logsumexp(z) for z near 1e9 rounds to the max itself
    # (1e9 + log 2 == 1e9), and the weights would sum to 2 instead of 1.
    def gradient(self, out_grad, node):
        from ..tensor import Tensor

        z = node.inputs[0]
        z_data = z.realize_cached_data()
        axes = normalize_axes(self.axes, z_data.ndim)
        kept = _kept_shape(z_data.shape, axes)
        # The shift is a constant: softmax does not depend on it, so its gradient graph is exact.
        top = Tensor.make_const(_stable_max(z_data, axes))
        weights = exp(z - top)
        return reshape(out_grad, kept) * weights / reshape(summation(weights, axes), kept)

    def gradient_data(self, out_grad, node):
        z = node.inputs[0].cached_data
        axes = normalize_axes(self.axes, z.ndim)
        weights = (z - _stable_max(z, axes)).exp()
        weights = weights / weights.sum(axis=axes, keepdims=True)
        return (out_grad.reshape(_kept_shape(z.shape, axes)) * weights,)


def logsumexp(a: Tensor, axes: int | Sequence[int] | None = None) -> Tensor:
    return LogSumExp(axes=axes)(a)


class LogSoftmax(TensorOp):
    """z - logsumexp(z) along ``axis`` (the last axis by default; the course's 2-D case is axis 1)."""

    def __init__(self, axis=-1):
        if not isinstance(as_axes(axis, "LogSoftmax"), int):
            raise TypeError(f"LogSoftmax: axis must be an int, got {type(axis).__name__} {axis!r}")
        self.axis = axis

    def compute(self, z: NDArray):
        normalize_axes(self.axis, z.ndim, "LogSoftmax")
        top = _stable_max(z, self.axis)
        shifted = z - top
        return shifted - shifted.exp().sum(axis=self.axis, keepdims=True).log()

    def gradient(self, out_grad, node):
        z = node.inputs[0]
        axis = normalize_axes(self.axis, len(z.shape))
        kept = _kept_shape(z.shape, axis)
        total = broadcast_to(reshape(summation(out_grad, axis), kept), z.shape)
        return out_grad - exp(node) * total


def logsoftmax(a: Tensor, axis: int = -1) -> Tensor:
    return LogSoftmax(axis)(a)


def _kept_shape(shape, axes):
    if axes is None:
        return (1,) * len(shape)
    return tuple(1 if i in axes else size for i, size in enumerate(shape))


def _reduced_shape(shape, axes):
    if axes is None:
        return ()
    return tuple(size for i, size in enumerate(shape) if i not in axes)
