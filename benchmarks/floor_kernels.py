"""The floor's elementwise stages, as numpy ufunc sequences (CPU) or fused CuPy kernels (GPU).

On a GPU at these sizes a step is bound by kernel launches, not arithmetic, so each stage that
numpy does in several passes is one kernel there: bias + ReLU, bias + softmax + cross-entropy
gradient, the ReLU mask, and the momentum update over all parameters at once.
"""
import numpy as np


class NumpyStages:
    """The stages as in-place numpy operations."""

    @staticmethod
    def bias_relu(h, bias):
        h += bias
        np.maximum(h, 0, out=h)

    @staticmethod
    def softmax_grad(z, bias, labels, rows, scale):
        """z <- scale * (softmax(z + bias) - onehot(labels)), in place."""
        z += bias
        z -= z.max(axis=1, keepdims=True)
        np.exp(z, out=z)
        z *= scale / z.sum(axis=1, keepdims=True)
        z[rows, labels] -= scale

    @staticmethod
    def relu_backward(h, hidden_grad):
        # NOTE: ReLU's gradient at exactly 0 is taken as 0, as in needle and torch.
        hidden_grad *= h > 0

    @staticmethod
    def momentum_update(grads, velocities, params, momentum, lr):
        """u = momentum * u + grad; w -= lr * u (grad already holds the (1 - momentum) factor)."""
        velocities *= momentum
        velocities += grads
        np.multiply(velocities, lr, out=grads)
        params -= grads


_SOFTMAX_GRAD_SOURCE = r"""
extern "C" __global__ void floor_softmax_grad(float* z, const float* bias, const long long* labels,
                                              int rows, int classes, float scale) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float* row = z + (long long)r * classes;
    float largest = -3.402823466e+38f;
    for (int c = 0; c < classes; ++c) {
        float v = row[c] + bias[c];
        row[c] = v;
        largest = fmaxf(largest, v);
    }
    float total = 0.0f;
    for (int c = 0; c < classes; ++c) {
        float e = expf(row[c] - largest);
        row[c] = e;
        total += e;
    }
    float factor = scale / total;
    for (int c = 0; c < classes; ++c) row[c] *= factor;
    row[labels[r]] -= scale;
}
"""


class CupyStages:
    """The stages as one fused CuPy kernel each (compiled on first use, then cached)."""

    def __init__(self):
        import cupy

        self._bias_relu = cupy.ElementwiseKernel("T bias", "T h", "h = max(h + bias, (T)0)", "floor_bias_relu")
        self._relu_backward = cupy.ElementwiseKernel(
            "T h", "T hidden_grad", "hidden_grad = h > (T)0 ? hidden_grad : (T)0", "floor_relu_backward"
        )
        self._momentum_update = cupy.ElementwiseKernel(
            "T grad, T momentum, T lr", "T velocity, T param",
            "velocity = momentum * velocity + grad; param -= lr * velocity", "floor_momentum_update",
        )
        self._softmax_grad = cupy.RawKernel(_SOFTMAX_GRAD_SOURCE, "floor_softmax_grad")

    def bias_relu(self, h, bias):
        self._bias_relu(bias, h)

    def softmax_grad(self, z, bias, labels, rows, scale):
        """z <- scale * (softmax(z + bias) - onehot(labels)), in place; one thread per row."""
        count, classes = z.shape
        threads = 128
        blocks = (count + threads - 1) // threads
        self._softmax_grad(
            (blocks,), (threads,), (z, bias, labels, np.int32(count), np.int32(classes), np.float32(scale))
        )

    def relu_backward(self, h, hidden_grad):
        self._relu_backward(h, hidden_grad)

    def momentum_update(self, grads, velocities, params, momentum, lr):
        self._momentum_update(grads, np.float32(momentum), np.float32(lr), velocities, params)
