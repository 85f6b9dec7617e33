"""needle: the benchmark's MLP through the course API, exactly as a student would write it.

``NeedleMLP`` calls ``loss.backward(create_graph=False)``, needle's array-only backward;
``NeedleCourseBackwardMLP`` calls the course's ``loss.backward()``, which also gives every node its
``.grad`` (the data batch's deferred, each leaf's a node that can be differentiated again).

``nn.Sequential`` of ``nn.Linear``/``nn.ReLU``, ``nn.SoftmaxLoss``, ``ndl.optim.SGD`` and
``ndl.data.DataLoader``; evaluation under ``ndl.no_grad()`` with ``model.eval()``.
"""
import numpy as np

from timing import HostPeakMemory, no_synchronize
from workload import EVAL_BATCH_SIZE

NEEDLE_MODULES = ("needle", "needle.nn", "needle.optim", "needle.data")
NEEDLE_API = (
    "cpu", "cuda", "Tensor", "no_grad", "nn.Sequential", "nn.Linear", "nn.ReLU", "nn.SoftmaxLoss",
    "optim.SGD", "data.DataLoader", "data.NDArrayDataset",
)


def needle_available():
    """(True, "") when needle's core, nn, optim and data import, else (False, the reason)."""
    import importlib

    for module in NEEDLE_MODULES:
        try:
            importlib.import_module(module)
        except Exception as error:  # a half-written module can fail in any way
            return False, f"import {module} failed: {type(error).__name__}: {error}"
    import needle

    missing = [name for name in NEEDLE_API if not _has_path(needle, name)]
    if missing:
        return False, f"needle has no {', '.join(missing)} yet"
    return True, ""


def _has_path(module, dotted):
    for part in dotted.split("."):
        if not hasattr(module, part):
            return False
        module = getattr(module, part)
    return True


class NeedleMLP:
    """784 -> H -> 10 ReLU MLP in needle, trained with the course's loop."""

    key = "needle"
    name = "needle create_graph=False"

    def __init__(self, workload):
        import needle as ndl
        import needle.nn as nn

        self.ndl, self.nn = ndl, nn
        self.workload = workload
        self.device = ndl.cuda() if workload.device == "cuda" else ndl.cpu()
        if workload.device == "cuda":
            import cupy

            self.synchronize = cupy.cuda.Device().synchronize
        else:
            self.synchronize = no_synchronize
        self.loader = self._make_loader()
        if self.loader is None:
            self.name += " (no DataLoader)"
        # Test images uploaded once, sliced per evaluation batch.
        self.test_images = self.device.xp.asarray(workload.test_images)
        self.test_labels = workload.test_labels

    def _make_loader(self):
        """The course's DataLoader, or None when this needle has none (batches are sliced here)."""
        ndl, workload = self.ndl, self.workload
        try:
            dataset = ndl.data.NDArrayDataset(workload.train_images, workload.train_labels)
            return ndl.data.DataLoader(dataset, workload.batch_size, shuffle=True, device=self.device)
        except (AttributeError, TypeError):
            xp = self.device.xp
            self.train_images = xp.asarray(workload.train_images)
            self.train_labels = xp.asarray(workload.train_labels)
            return None

    def memory_meter(self):
        if self.workload.device == "cuda":
            from timing import CupyPoolPeakMemory

            return CupyPoolPeakMemory()
        return HostPeakMemory()

    def reset(self, weights):
        """A fresh model and optimiser holding the initial weights."""
        ndl, nn, device = self.ndl, self.nn, self.device
        hidden = self.workload.hidden
        self.model = nn.Sequential(
            nn.Linear(784, hidden, device=device), nn.ReLU(), nn.Linear(hidden, 10, device=device)
        )
        w1, b1, w2, b2 = weights
        first, last = self.model.modules[0], self.model.modules[2]
        first.weight.data = ndl.Tensor(w1, device=device)
        first.bias.data = ndl.Tensor(b1, device=device)
        last.weight.data = ndl.Tensor(w2, device=device)
        last.bias.data = ndl.Tensor(b2, device=device)
        self.loss_fn = nn.SoftmaxLoss()
        self.opt = ndl.optim.SGD(self.model.parameters(), lr=self.workload.lr, momentum=self.workload.momentum)
        self.model.train()

    def _batches(self):
        if self.loader is not None:
            yield from self.loader
            return
        ndl, device = self.ndl, self.device
        order = device.xp.asarray(np.random.permutation(self.train_images.shape[0]))
        batch_size = self.workload.batch_size
        for start in range(0, order.shape[0], batch_size):
            indices = order[start : start + batch_size]
            yield (
                ndl.Tensor(self.train_images[indices], device=device, requires_grad=False),
                ndl.Tensor(self.train_labels[indices], device=device, requires_grad=False),
            )

    def _step(self, x, y):
        self.opt.reset_grad()
        loss = self.loss_fn(self.model(x), y)
        loss.backward(create_graph=False)
        self.opt.step()


    def train_epoch(self):
        for x, y in self._batches():
            self._step(x, y)

    def train_steps(self, steps):
        """A few steps, for warm-up."""
        for step, (x, y) in enumerate(self._batches()):
            if step == steps:
                break
            self._step(x, y)

    def evaluate(self):
        """Test accuracy in [0, 1]."""
        ndl, device = self.ndl, self.device
        self.model.eval()
        correct = 0
        with ndl.no_grad():
            for start in range(0, self.test_images.shape[0], EVAL_BATCH_SIZE):
                x = ndl.Tensor(self.test_images[start : start + EVAL_BATCH_SIZE], device=device, requires_grad=False)
                predictions = self.model(x).numpy().argmax(axis=1)
                correct += int((predictions == self.test_labels[start : start + EVAL_BATCH_SIZE]).sum())
        self.model.train()
        return correct / self.test_images.shape[0]


class NeedleCourseBackwardMLP(NeedleMLP):
    """The same, with ``loss.backward()`` as the course writes it: every node gets its ``.grad``."""

    key = "needle-course"
    name = "needle backward()"

    def _step(self, x, y):
        self.opt.reset_grad()
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.opt.step()
