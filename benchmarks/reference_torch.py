"""The PyTorch reference: the benchmark's MLP in eager PyTorch, autograd and all.

The momentum update is written by hand on the parameters' data, because ``torch.optim.SGD``
with ``dampening=0.9`` starts its buffer at the first gradient undamped, which is not the
course's rule ``u = momentum * u + (1 - momentum) * grad`` from u = 0.
"""
import numpy as np

from timing import HostPeakMemory, TorchCudaPeakMemory, no_synchronize
from workload import EVAL_BATCH_SIZE, ShuffledIndexBatches


def torch_available():
    """(True, version) when PyTorch imports, else (False, the reason)."""
    try:
        import torch
    except ImportError as error:
        return False, str(error)
    return True, torch.__version__


class TorchMLP(ShuffledIndexBatches):
    """784 -> H -> 10 ReLU MLP as four leaf tensors, ``F.cross_entropy`` and a hand-written update."""

    key = "torch"
    name = "PyTorch"

    def __init__(self, workload):
        import torch

        self.torch = torch
        self.workload = workload
        self.device = torch.device("cuda" if workload.device == "cuda" else "cpu")
        self.synchronize = torch.cuda.synchronize if workload.device == "cuda" else no_synchronize
        # Uploaded once; cross_entropy wants int64 labels, converted here rather than per batch.
        self.train_images = torch.from_numpy(workload.train_images).to(self.device)
        self.train_labels = torch.from_numpy(workload.train_labels.astype(np.int64)).to(self.device)
        self.test_images = torch.from_numpy(workload.test_images).to(self.device)
        self.test_labels = torch.from_numpy(workload.test_labels.astype(np.int64)).to(self.device)

    def memory_meter(self):
        if self.workload.device == "cuda":
            return TorchCudaPeakMemory()
        return HostPeakMemory()

    def reset(self, weights):
        """Load the initial weights and zero the momentum."""
        torch = self.torch
        self.params = [torch.tensor(w, device=self.device, requires_grad=True) for w in weights]
        self.velocities = [torch.zeros_like(p) for p in self.params]

    def _forward(self, x):
        w1, b1, w2, b2 = self.params
        hidden = self.torch.relu(self.torch.addmm(b1, x, w1))
        return self.torch.addmm(b2, hidden, w2)

    def _step(self, batch_indices):
        torch = self.torch
        x = self.train_images[batch_indices]
        y = self.train_labels[batch_indices]
        for param in self.params:
            param.grad = None
        loss = torch.nn.functional.cross_entropy(self._forward(x), y)
        loss.backward()
        momentum, lr = self.workload.momentum, self.workload.lr
        with torch.no_grad():
            grads = [param.grad for param in self.params]
            torch._foreach_mul_(self.velocities, momentum)
            torch._foreach_add_(self.velocities, grads, alpha=1.0 - momentum)
            torch._foreach_add_(self.params, self.velocities, alpha=-lr)

    def _epoch_order(self):
        order = np.random.permutation(self.train_images.shape[0])
        return self.torch.from_numpy(order).to(self.device)

    def evaluate(self):
        """Test accuracy in [0, 1]."""
        torch = self.torch
        correct = torch.zeros((), dtype=torch.int64, device=self.device)
        with torch.no_grad():
            for start in range(0, self.test_images.shape[0], EVAL_BATCH_SIZE):
                logits = self._forward(self.test_images[start : start + EVAL_BATCH_SIZE])
                labels = self.test_labels[start : start + EVAL_BATCH_SIZE]
                correct += (logits.argmax(dim=1) == labels).sum()
        return correct.item() / self.test_images.shape[0]
