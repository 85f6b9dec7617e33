"""Log-domain reductions: LogSumExp and LogSoftmax, stable for inputs of any magnitude."""
from ..autograd import TensorOp
from .. import backend_ndarray as array_api
from ..backend_ndarray import NDArray
from ._shapes import as_axes, normalize_axes
from .ops_mathematic import exp
from .ops_shape import broadcast_to, reshape, summation


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

    def gradient(self, out_grad, node):
        z = node.inputs[0]
        kept = _kept_shape(z.shape, normalize_axes(self.axes, len(z.shape)))
        lse = broadcast_to(reshape(node, kept), z.shape)
        grad = broadcast_to(reshape(out_grad, kept), z.shape)
        return grad * exp(z - lse)

    def gradient_data(self, out_grad, node):
        z = node.inputs[0].cached_data
        kept = _kept_shape(z.shape, normalize_axes(self.axes, z.ndim))
        softmax = (z - node.cached_data.reshape(kept)).exp()
        return (out_grad.reshape(kept) * softmax,)


def logsumexp(a, axes=None):
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


def logsoftmax(a, axis=-1):
    return LogSoftmax(axis)(a)


def _kept_shape(shape, axes):
    if axes is None:
        return (1,) * len(shape)
    return tuple(1 if i in axes else size for i, size in enumerate(shape))


def _reduced_shape(shape, axes):
    if axes is None:
        return ()
    return tuple(size for i, size in enumerate(shape) if i not in axes)
