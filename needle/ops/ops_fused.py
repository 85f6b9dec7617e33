"""Fused ops: one node (and one backward step) where a chain of small ops would cost more.

``linear`` is ``x @ weight + bias`` and ``softmax_cross_entropy`` is the mean cross-entropy of
logits against integer labels; both give exactly the values of the unfused chains.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..autograd import TensorOp
from ..backend_ndarray import NDArray
from ..backend_ndarray.kernels import SoftmaxCrossEntropySaved
from ..backend_ndarray.products import matmul
from ..deferred import deferred_array_product, deferred_product, is_deferrable
from .ops_logarithmic import logsoftmax
from .ops_mathematic import exp
from .ops_shape import MatMul, broadcast_to, reshape, sum_to_shape, summation

if TYPE_CHECKING:
    from ..tensor import Tensor


_GRAD_INPUT_PRODUCT = MatMul(False, True)  # out_grad @ weight^T (a MatMul keeps nothing but its flags)


class LinearOp(TensorOp):
    """``x @ weight + bias`` for ``x`` of shape (..., in), weight (in, out), bias broadcastable to (out,)."""

    def compute(self, x: NDArray, weight: NDArray, bias: NDArray = None):
        x_raw, weight_raw = x.raw, weight.raw
        if x_raw.shape[-1] != weight_raw.shape[0]:
            raise ValueError(
                f"LinearOp: input has {x.shape[-1]} features (shape {x.shape}) but the weight "
                f"expects {weight.shape[0]} (shape {weight.shape})"
            )
        out = matmul(x_raw, weight_raw)
        if bias is not None:
            bias_raw = bias.raw
            # NOTE: nn.Linear's (1, out) bias broadcasts over a batch as it is; any other shape
            # is flattened to (out,) first. Both add the same values.
            if bias_raw.ndim != 2 or bias_raw.shape[0] != 1 or out.ndim != 2:
                bias_raw = bias_raw.reshape(-1)
            out += bias_raw
        return NDArray.wrap(out, x.device)

    def gradient(self, out_grad, node):
        x, weight = node.inputs[0], node.inputs[1]
        features_in, features_out = weight.shape
        grad_flat = out_grad if out_grad.ndim == 2 else reshape(out_grad, (-1, features_out))
        # NOTE: every input gets its gradient, also one that needs none (a first layer's batch),
        # as the course's backward() gives every node its .grad; the fast path skips those.
        # The products take their operands transposed in place: one node each.
        if is_deferrable(x):
            grad_x = deferred_product(MatMul(False, True), out_grad, weight, x.shape)  # computed when read
        else:
            grad_x = MatMul(False, True)(out_grad, weight)
        x_flat = x if x.ndim == 2 else reshape(x, (-1, features_in))
        grad_weight = MatMul(True, False)(x_flat, grad_flat)
        if len(node.inputs) == 2:
            return grad_x, grad_weight
        bias = node.inputs[2]
        if bias.ndim <= 2:
            grad_bias = sum_to_shape(grad_flat, bias.shape)
        else:
            grad_bias = reshape(summation(grad_flat, axes=(0,)), bias.shape)
        return grad_x, grad_weight, grad_bias

    def constant_input_gradients(self, out_grad, node):
        inputs = node.inputs
        x = inputs[0]
        if is_deferrable(x) and inputs[1].requires_grad and (len(inputs) == 2 or inputs[2].requires_grad):
            # the first layer's data batch: computed when read
            weight = inputs[1].cached_data
            grad_x = deferred_array_product(_GRAD_INPUT_PRODUCT, out_grad, weight, x.shape)
            return (grad_x,) + (None,) * (len(inputs) - 1)
        return super().constant_input_gradients(out_grad, node)

    def gradient_data(self, out_grad, node):
        # NOTE: on the device's raw arrays, as compute is: this runs for every layer of every
        # training step, and the NDArray methods would add a wrapper per view and product.
        inputs = node.inputs
        x, weight = inputs[0], inputs[1]
        device = out_grad.device
        w = weight.cached_data.raw
        g = out_grad.raw
        g_flat = g if g.ndim == 2 else g.reshape(-1, w.shape[1])
        grad_x = NDArray.wrap(matmul(g, w.T), device) if x.requires_grad else None
        grad_weight = None
        if weight.requires_grad:
            x_raw = x.cached_data.raw
            x_flat = x_raw if x_raw.ndim == 2 else x_raw.reshape(-1, w.shape[0])
            grad_weight = NDArray.wrap(matmul(x_flat.T, g_flat), device)
        if len(inputs) == 2:
            return grad_x, grad_weight
        bias = inputs[2]
        grad_bias = None
        if bias.requires_grad:
            grad_bias = NDArray.wrap(g_flat.sum(axis=0).reshape(bias.cached_data.raw.shape), device)
        return grad_x, grad_weight, grad_bias


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight + bias`` as one node.

    Example:
        >>> import needle as ndl
        >>> x = ndl.Tensor([[1.0, 2.0]])
        >>> w = ndl.Tensor([[1.0], [1.0]])
        >>> ndl.ops.linear(x, w, ndl.Tensor([[0.5]])).numpy().tolist()
        [[3.5]]
    """
    if bias is None:
        return LinearOp()(x, weight)
    return LinearOp()(x, weight, bias)


class SoftmaxCrossEntropy(TensorOp):
    """Mean over the batch of ``logsumexp(logits) - logits[label]``; labels are integer class ids.

    The forward saves the device routine's ``SoftmaxCrossEntropySaved`` arrays (see
    :mod:`needle.backend_ndarray.kernels`) for the first backward, which uses them up.
    """

    def compute(self, logits: NDArray, labels: NDArray):
        logits_raw = logits.raw
        shape = logits_raw.shape
        if len(shape) != 2 or labels.raw.shape != shape[:1]:
            raise ValueError(
                f"SoftmaxCrossEntropy needs logits of shape (batch, classes) and labels of shape (batch,); "
                f"got logits {logits.shape} and labels {labels.shape}"
            )
        device = logits.device
        loss, saved = _softmax_cross_entropy(device.kernels, logits_raw, labels, shape[1])
        # NOTE: saved (batch x classes, small) feeds the fast backward path; the first backward
        # turns it into the gradient in place, a later one recomputes it.
        wrap = NDArray.wrap
        self.save_for_backward(wrap(saved.exp_shifted, device), wrap(saved.totals, device), wrap(saved.label_ids, device))
        return wrap(loss, device)

    def gradient(self, out_grad, node):
        logits, labels = node.inputs
        saved = self.saved_arrays
        self.release_saved()
        return SoftmaxCrossEntropyGradient(saved)(logits, labels, out_grad), None

    def gradient_data(self, out_grad, node):
        saved = _take_saved(self)
        logits, labels = node.inputs
        return _cross_entropy_gradient(saved, logits.realize_cached_data(), labels.realize_cached_data(), out_grad), None


class SoftmaxCrossEntropyGradient(TensorOp):
    """``out_grad * (softmax(logits) - one_hot(labels)) / batch``: SoftmaxCrossEntropy's gradient as one node.

    ``saved`` is what the forward saved (the exponentials, their row sums and the label ids, as
    NDArrays); the gradient is made from it in place, or from scratch when there is none.
    """

    def __init__(self, saved=()):
        if saved:
            self.save_for_backward(*saved)

    def compute(self, logits: NDArray, labels: NDArray, out_grad: NDArray):
        saved = _take_saved(self)
        return _cross_entropy_gradient(saved, logits, labels, out_grad)

    def gradient(self, adjoint, node):
        # NOTE: with p = softmax(z) and s = out_grad / batch, d(s (p_ij - y_ij)) / dz_il =
        # s p_ij (delta_jl - p_il), so the adjoint V maps to s p (V - rowsum(V p)).
        logits, labels, out_grad = node.inputs
        batch, classes = logits.shape
        softmax = exp(logsoftmax(logits, axis=1))
        scale = broadcast_to(reshape(out_grad, (1, 1)), logits.shape) / batch
        row_dot = broadcast_to(reshape(summation(adjoint * softmax, axes=(1,)), (batch, 1)), logits.shape)
        grad_logits = softmax * (adjoint - row_dot) * scale
        one_hot = _one_hot_tensor(labels, classes, logits)
        grad_out_grad = reshape(summation(adjoint * (softmax - one_hot)) / batch, out_grad.shape)
        return grad_logits, None, grad_out_grad


def _take_saved(op):
    """The cross-entropy arrays ``op`` saved, as the device routines' ``SoftmaxCrossEntropySaved``, released from ``op``; None if none."""
    arrays = op.saved_arrays
    if not arrays:
        return None
    op.release_saved()
    return SoftmaxCrossEntropySaved(*(array.raw for array in arrays))


def _cross_entropy_gradient(saved, logits: NDArray, labels: NDArray, out_grad: NDArray):
    """The gradient array from what the forward ``saved`` (used up in place), or from scratch."""
    kernels = logits.device.kernels
    if saved is None:
        _, saved = _softmax_cross_entropy(kernels, logits.raw, labels, logits.shape[1])
    return NDArray.wrap(kernels.softmax_cross_entropy_gradient(saved, out_grad.raw), logits.device)


class LabelRangeError(IndexError, ValueError):
    """A class label outside ``[0, classes)``: an IndexError (as PyTorch's) and a ValueError."""


def _softmax_cross_entropy(kernels, logits_raw, labels: NDArray, classes):
    """The device routine's ``(loss, saved)`` for checked labels; an out-of-range label raises LabelRangeError."""
    label_ids = _label_ids(labels, classes)
    try:
        return kernels.softmax_cross_entropy(logits_raw, label_ids)
    except IndexError:
        # NOTE: the routine's gather of each row's label is the range check of small unsigned
        # ids (see _label_ids); its error is renamed here, before the op has kept anything.
        _check_label_range(labels.raw, classes)
        raise


def _label_ids(labels: NDArray, classes):
    """The labels as integer class ids, checked (see ``softmax_cross_entropy`` for what is checked where)."""
    raw = labels.raw
    kind = raw.dtype.kind
    if kind == "f":
        return _float_label_ids(raw, classes, labels.device.xp)
    if kind not in "iu":
        raise TypeError(
            f"SoftmaxCrossEntropy needs integer class labels, got dtype {raw.dtype}: "
            "pass class ids, e.g. ndl.Tensor(y, dtype='int64')"
        )
    if labels.device.name != "cpu":
        # NOTE: not range-checked on a GPU: the check would wait for the device every step.
        # The CUDA kernel makes the loss NaN instead.
        return raw
    # NOTE: an unsigned id narrower than an index can be neither negative nor wrap around, so
    # the routine's own gather (numpy bounds-checks every index) checks it at no extra pass:
    # the DataLoader's uint8 MNIST labels take this path every step. Signed ids and uint64
    # (which numpy would wrap into negative indices) are checked here, in one reduction.
    if kind == "u" and raw.dtype.itemsize < 8:
        return raw
    _check_label_range(raw, classes)
    return raw


def _check_label_range(raw, classes):
    """Raise LabelRangeError naming the first id of ``raw`` (numpy, integer) outside [0, classes)."""
    # NOTE: signed ids are read as unsigned, so a negative id is huge: one reduction checks both ends.
    if raw.size and raw.view(raw.dtype.str.replace("i", "u")).max() >= classes:
        position = int(((raw < 0) | (raw >= classes)).argmax())
        raise LabelRangeError(
            f"SoftmaxCrossEntropy: label {raw[position]} (at position {position}) is out of range "
            f"for {classes} classes: labels must be class ids in [0, {classes})"
        )


def _float_label_ids(raw, classes, xp):
    """Float labels as int64 ids: each must be a whole number in [0, classes) (one vectorised check)."""
    # NOTE: NaN fails every comparison, so it is caught here too; the cast happens only after.
    valid = (raw == xp.floor(raw)) & (raw >= 0) & (raw < classes)
    if not bool(valid.all()):
        position = int((~valid).argmax())
        value = raw[position]
        if bool(xp.isfinite(value)) and bool(value == xp.floor(value)):
            raise LabelRangeError(
                f"SoftmaxCrossEntropy: label {value!s} (at position {position}) is out of range "
                f"for {classes} classes: labels must be class ids in [0, {classes})"
            )
        raise ValueError(
            f"SoftmaxCrossEntropy: label {value!s} (at position {position}) is not a class id: "
            f"labels must be whole numbers in [0, {classes}); pass integer labels, "
            "e.g. ndl.Tensor(y, dtype='int64')"
        )
    return raw.astype("int64")


def _one_hot_tensor(labels, classes, like):
    from ..init import one_hot

    return one_hot(classes, labels, device=like.device, dtype=like.dtype)


def softmax_cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean softmax cross-entropy of ``logits`` (batch, classes) against integer ``labels``.

    Labels are class ids: an integer dtype, or floats that are all whole numbers (a list such as
    ``ndl.Tensor([0, 2])`` becomes float32). They are checked in one vectorised pass:

    - a float label that is not a whole number (1.7, -0.5, NaN) raises ValueError, on every device;
    - a label outside ``[0, classes)`` raises ``LabelRangeError`` (an IndexError and a ValueError)
      on the CPU, and for float labels on any device;
    - integer labels on a GPU are not range-checked (the check would wait for the GPU every
      step): an out-of-range label there makes the loss NaN (and its row's
      gradient plain softmax) instead of raising.

    Example:
        >>> import needle as ndl
        >>> logits = ndl.Tensor([[0.0, 0.0]])
        >>> round(ndl.ops.softmax_cross_entropy(logits, ndl.Tensor([1], dtype="int64")).item(), 4)
        0.6931
        >>> ndl.ops.softmax_cross_entropy(logits, ndl.Tensor([0.5]))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: SoftmaxCrossEntropy: label 0.5 (at position 0) is not a class id: ...
    """
    return SoftmaxCrossEntropy()(logits, labels)
