"""The fused routines as one CuPy kernel each, for the CUDA device.

At training sizes a GPU step is bound by kernel launches, not arithmetic: the array-module
versions in :mod:`.fused` cost 4 launches per parameter for a momentum step, 11 for Adam and
about 12 for softmax cross-entropy. Here each routine is one launch (the loss two: the rows,
then their mean). Kernels compile on first use and CuPy caches them on disk.

A kernel takes float32 or float64 arrays whose dtypes all match (labels: any integer type);
anything else (mixed dtypes, float16) goes to the array-module versions, which give the same
values.
"""
import numpy

from .fused import ArrayRoutines

_FLOATS = (numpy.dtype(numpy.float32), numpy.dtype(numpy.float64))

# Each kernel as CuPy's ElementwiseKernel takes it: (in_params, out_params, operation, name).
SGD_STEP = (
    "T gradient, T lr, T weight_decay", "T weight",
    "weight -= lr * (gradient + weight_decay * weight)",
    "needle_sgd_step",
)
MOMENTUM_STEP = (
    "T gradient, T momentum, T step, T weight_decay", "T velocity, T weight",
    "velocity = momentum * velocity + gradient + weight_decay * weight; weight -= step * velocity",
    "needle_momentum_step",
)
ADAM_STEP = (
    "T gradient, T beta1, T beta2, T eps, T weight_decay, T step_size, T inverse_sqrt_c2",
    "T first, T second, T weight",
    """
    T g = gradient + weight_decay * weight;
    first = beta1 * first + (1 - beta1) * g;
    second = beta2 * second + (1 - beta2) * (g * g);
    weight -= step_size * first / (sqrt(second) * inverse_sqrt_c2 + eps);
    """,
    "needle_adam_step",
)
RELU_BACKWARD = (
    "T out_grad, T out", "T in_grad",
    "in_grad = out > (T)0 ? out_grad : (T)0",
    "needle_relu_backward",
)
# NOTE: one thread per row, which suits the few classes of a classifier (10 for MNIST). A label
# outside [0, classes) makes that row's loss NaN and its gradient row plain softmax: the loss
# then shows the error without the device sync a range check would cost every step.
SOFTMAX_CROSS_ENTROPY_ROWS = (
    "raw T logits, raw I labels, int32 classes", "raw T exp_shifted, T totals, T row_losses",
    """
    const long long start = i * classes;
    T largest = logits[start];
    for (int c = 1; c < classes; ++c) largest = logits[start + c] > largest ? logits[start + c] : largest;
    T total = 0;
    for (int c = 0; c < classes; ++c) {
        T e = exp(logits[start + c] - largest);
        exp_shifted[start + c] = e;
        total += e;
    }
    totals = total;
    long long label = (long long)labels[i];
    row_losses = (label >= 0 && label < classes) ? log(total) - (logits[start + label] - largest) : (T)nan("");
    """,
    "needle_softmax_cross_entropy_rows",
)
SOFTMAX_CROSS_ENTROPY_GRADIENT = (
    "raw T totals, raw I labels, raw T out_grad, int32 classes, T inverse_batch", "T exp_shifted",
    """
    long long row = i / classes;
    T scale = out_grad[0] * inverse_batch;
    long long label = (long long)labels[row];
    exp_shifted = exp_shifted * (scale / totals[row]) - ((long long)(i % classes) == label ? scale : (T)0);
    """,
    "needle_softmax_cross_entropy_gradient",
)
KERNELS = {
    "_sgd": SGD_STEP,
    "_momentum": MOMENTUM_STEP,
    "_adam": ADAM_STEP,
    "_relu_backward": RELU_BACKWARD,
    "_softmax_cross_entropy_rows": SOFTMAX_CROSS_ENTROPY_ROWS,
    "_softmax_cross_entropy_gradient": SOFTMAX_CROSS_ENTROPY_GRADIENT,
}


class CupyKernels(ArrayRoutines):
    """The routines of :class:`ArrayRoutines`, each one CuPy kernel.

    Args:
        cupy: the CuPy module (or anything with its ``ElementwiseKernel`` and array functions).
    """

    def __init__(self, cupy):
        super().__init__(cupy)
        for attribute, spec in KERNELS.items():
            setattr(self, attribute, cupy.ElementwiseKernel(*spec))

    def sgd_step(self, weight, gradient, lr, weight_decay):
        if not _same_float_dtype(weight, gradient):
            return super().sgd_step(weight, gradient, lr, weight_decay)
        scalar = weight.dtype.type
        self._sgd(gradient, scalar(lr), scalar(weight_decay), weight)

    def momentum_step(self, weight, velocity, gradient, momentum, step, weight_decay):
        if not _same_float_dtype(weight, velocity, gradient):
            return super().momentum_step(weight, velocity, gradient, momentum, step, weight_decay)
        scalar = weight.dtype.type
        self._momentum(gradient, scalar(momentum), scalar(step), scalar(weight_decay), velocity, weight)

    def adam_step(self, weight, first, second, gradient, hyper):
        if not _same_float_dtype(weight, first, second, gradient):
            return super().adam_step(weight, first, second, gradient, hyper)
        scalar = weight.dtype.type
        self._adam(
            gradient, scalar(hyper.beta1), scalar(hyper.beta2), scalar(hyper.eps), scalar(hyper.weight_decay),
            scalar(hyper.step_size), scalar(hyper.inverse_sqrt_c2), first, second, weight,
        )

    def relu_backward(self, out_grad, out):
        if not _same_float_dtype(out_grad, out):
            return super().relu_backward(out_grad, out)
        return self._relu_backward(out_grad, out)

    def softmax_cross_entropy(self, logits, label_ids):
        if not _same_float_dtype(logits) or label_ids.dtype.kind not in "iu" or 0 in logits.shape:
            return super().softmax_cross_entropy(logits, label_ids)
        cupy = self.xp
        logits = cupy.ascontiguousarray(logits)
        label_ids = cupy.ascontiguousarray(label_ids)
        batch, classes = logits.shape
        exp_shifted = cupy.empty_like(logits)
        totals = cupy.empty(batch, dtype=logits.dtype)
        row_losses = cupy.empty(batch, dtype=logits.dtype)
        self._softmax_cross_entropy_rows(
            logits, label_ids, numpy.int32(classes), exp_shifted, totals, row_losses
        )
        return row_losses.mean(), (exp_shifted, totals, label_ids)

    def softmax_cross_entropy_gradient(self, saved, out_grad):
        if len(saved) != 3:  # saved by the array-module version
            return super().softmax_cross_entropy_gradient(saved, out_grad)
        exp_shifted, totals, label_ids = saved
        batch, classes = exp_shifted.shape
        out_grad = out_grad.astype(exp_shifted.dtype, copy=False).reshape(1)
        self._softmax_cross_entropy_gradient(
            totals, label_ids, out_grad, numpy.int32(classes), exp_shifted.dtype.type(1 / batch), exp_shifted
        )
        return exp_shifted


def _same_float_dtype(first, *others):
    dtype = first.dtype
    return dtype in _FLOATS and all(other.dtype == dtype for other in others)
