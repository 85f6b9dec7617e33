"""The floor: the benchmark's MLP written by hand in numpy (CPU) or CuPy (GPU), with no graph.

Forward, hand-derived backward and an in-place momentum update, into buffers allocated once per
batch size, so each step does the arithmetic and almost nothing else. Parameters, gradients and
velocities each live in one flat buffer (the parameters are views into it), so the update is one
pass over all of them. The loss value itself is never computed: the update does not need it, and
the other implementations do not read theirs.
"""
import numpy as np

from floor_kernels import CupyStages, NumpyStages
from timing import HostPeakMemory, no_synchronize
from workload import EVAL_BATCH_SIZE, ShuffledIndexBatches


class _StepBuffers:
    """Scratch arrays for one batch size: activations and their gradients."""

    def __init__(self, xp, batch_size, hidden, classes):
        self.hidden = xp.empty((batch_size, hidden), dtype=xp.float32)
        self.hidden_grad = xp.empty((batch_size, hidden), dtype=xp.float32)
        self.logits = xp.empty((batch_size, classes), dtype=xp.float32)
        self.rows = xp.arange(batch_size)


class FloorMLP(ShuffledIndexBatches):
    """784 -> H -> 10 ReLU MLP, softmax cross-entropy, SGD with the course's momentum rule."""

    key = "numpy"

    def __init__(self, workload):
        self.workload = workload
        if workload.device == "cuda":
            import cupy

            self.xp = cupy
            self.name = "floor (cupy)"
            self.synchronize = cupy.cuda.Device().synchronize
            self.stages = CupyStages()
        else:
            self.xp = np
            self.name = "floor (numpy)"
            self.synchronize = no_synchronize
            self.stages = NumpyStages()
        xp = self.xp
        # Uploaded once; labels become platform integers so indexing with them is direct.
        self.train_images = xp.asarray(workload.train_images)
        self.train_labels = xp.asarray(workload.train_labels.astype(np.intp))
        self.test_images = xp.asarray(workload.test_images)
        self.test_labels = xp.asarray(workload.test_labels.astype(np.intp))
        self._buffers = {}

    def memory_meter(self):
        if self.workload.device == "cuda":
            from timing import CupyPoolPeakMemory

            return CupyPoolPeakMemory()
        return HostPeakMemory()

    def reset(self, weights):
        """Load the initial weights and zero the momentum."""
        xp = self.xp
        sizes = [w.size for w in weights]
        self.flat_params = xp.asarray(np.concatenate([w.ravel() for w in weights]).astype(np.float32))
        self.flat_grads = xp.zeros_like(self.flat_params)
        self.flat_velocities = xp.zeros_like(self.flat_params)
        offsets = np.cumsum([0] + sizes)
        self.params = [self.flat_params[a:b].reshape(w.shape) for a, b, w in zip(offsets, offsets[1:], weights)]
        self.grads = [self.flat_grads[a:b].reshape(w.shape) for a, b, w in zip(offsets, offsets[1:], weights)]

    def _buffers_for(self, batch_size):
        buffers = self._buffers.get(batch_size)
        if buffers is None:
            buffers = _StepBuffers(self.xp, batch_size, self.workload.hidden, 10)
            self._buffers[batch_size] = buffers
        return buffers

    def _step(self, batch_indices):
        xp = self.xp
        w1, b1, w2, b2 = self.params
        grad_w1, grad_b1, grad_w2, grad_b2 = self.grads
        batch_size = batch_indices.shape[0]
        buf = self._buffers_for(batch_size)
        h, dh, z = buf.hidden, buf.hidden_grad, buf.logits
        # NOTE: plain fancy indexing; take(..., out=) measured 2-3x slower in numpy 2.4.
        x = self.train_images[batch_indices]
        labels = self.train_labels[batch_indices]

        # forward (the output layer's bias is added inside softmax_grad)
        xp.matmul(x, w1, out=h)
        self.stages.bias_relu(h, b1)
        xp.matmul(h, w2, out=z)

        # d(mean cross-entropy)/dz = (softmax(z) - onehot(y)) / batch, here pre-multiplied by
        # (1 - momentum): every gradient below is linear in dz, so they all come out already
        # scaled for the momentum rule and the update saves one pass over each parameter.
        momentum, lr = self.workload.momentum, self.workload.lr
        self.stages.softmax_grad(z, b2, labels, buf.rows, (1.0 - momentum) / batch_size)

        # backward
        xp.matmul(h.T, z, out=grad_w2)
        xp.sum(z, axis=0, keepdims=True, out=grad_b2)
        xp.matmul(z, w2.T, out=dh)
        self.stages.relu_backward(h, dh)
        xp.matmul(x.T, dh, out=grad_w1)
        xp.sum(dh, axis=0, keepdims=True, out=grad_b1)

        # u = momentum * u + (1 - momentum) * grad, the factor already in grad; w -= lr * u.
        self.stages.momentum_update(self.flat_grads, self.flat_velocities, self.flat_params, momentum, lr)

    def _epoch_order(self):
        order = np.random.permutation(self.train_images.shape[0])
        return self.xp.asarray(order)

    def evaluate(self):
        """Test accuracy in [0, 1]."""
        w1, b1, w2, b2 = self.params
        correct = 0
        for start in range(0, self.test_images.shape[0], EVAL_BATCH_SIZE):
            x = self.test_images[start : start + EVAL_BATCH_SIZE]
            h = x @ w1
            self.stages.bias_relu(h, b1)
            z = h @ w2
            z += b2
            correct += (z.argmax(axis=1) == self.test_labels[start : start + EVAL_BATCH_SIZE]).sum()
        return float(correct) / self.test_images.shape[0]
