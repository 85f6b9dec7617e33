"""Evaluation with and without ``needle.no_grad()``: the NoGradWarning and what it saves.

Run from a fresh checkout (a few seconds):  python examples/eval_no_grad.py

A small MLP is trained briefly on MNIST, then evaluated on 2,000 test images twice: first
without ``no_grad`` (every batch builds a graph no backward() will use; the MemoryMonitor says
so, naming the line), then inside ``with needle.no_grad():`` (no graph node at all).
"""
import gc
import os
import sys
import time
import warnings

import numpy as np

try:
    import needle as ndl
except ImportError:  # run from a checkout without installing it
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import needle as ndl
import needle.data
from needle import nn, optim
from trainers import MemoryMonitor

REPO_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
BATCH = 100


def tensors(images, labels):
    return ndl.Tensor(images, requires_grad=False), ndl.Tensor(labels.astype("int64"), dtype="int64", requires_grad=False)


def trained_model(files):
    train = needle.data.MNISTDataset(str(files.train_images), str(files.train_labels))
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.SoftmaxLoss()
    for start in range(0, 2000, BATCH):
        x, y = tensors(train.images[start : start + BATCH], train.labels[start : start + BATCH])
        optimizer.reset_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    optimizer.reset_grad()  # drop the last gradients (and the graphs they hold) before evaluating
    return model


def evaluate(model, test, use_no_grad):
    model.eval()
    correct = 0
    with MemoryMonitor() as monitor:
        with ndl.no_grad() if use_no_grad else _nothing():
            for start in range(0, 2000, BATCH):
                x, y = tensors(test.images[start : start + BATCH], test.labels[start : start + BATCH])
                logits = model(x)
                correct += int((logits.numpy().argmax(axis=1) == y.numpy()).sum())
                monitor.step()
    return correct / 2000, monitor


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False


def report(title, accuracy, monitor):
    history = monitor.history
    made = sum(r.nodes_created for r in history) / len(history)
    print(f"\n{title}")
    print(f"  accuracy {accuracy:.3f}")
    print(f"  graph nodes made per batch: {made:.0f}; most graph nodes alive at a step: "
          f"{max(r.live_nodes for r in history)}")
    print(f"  {'batch':>5}  {'nodes made':>10}  {'live graph nodes':>16}  {'array memory':>12}")
    for record in history[:3] + history[-1:]:
        print(f"  {record.iteration:>5}  {record.nodes_created:>10}  {record.live_nodes:>16}  "
              f"{record.live_bytes / 1e3:>9.1f} KB")


def show_warning(message, category, filename, lineno, file=None, line=None):
    """Print warnings on stdout, so that they appear in order with the tables."""
    print("\n" + warnings.formatwarning(message, category, filename, lineno, line), end="")


def main():
    started = time.perf_counter()
    warnings.showwarning = show_warning  # where warnings are printed; the user's filters stay as they are
    files = needle.data.mnist(root=REPO_DATA)
    model = trained_model(files)
    test = needle.data.MNISTDataset(str(files.test_images), str(files.test_labels))
    gc.collect()

    print("Evaluating 2,000 MNIST test images in batches of 100, without no_grad:")
    accuracy, without = evaluate(model, test, use_no_grad=False)
    report("without no_grad():", accuracy, without)
    gc.collect()
    print("\nThe same loop inside `with needle.no_grad():`")
    accuracy, inside = evaluate(model, test, use_no_grad=True)
    report("with no_grad():", accuracy, inside)
    held = without.history[-1].live_bytes - inside.history[-1].live_bytes
    made = sum(r.nodes_created for r in without.history)
    print(f"\nno_grad() saved {made} graph nodes over the 20 batches and {held / 1e3:.1f} KB of arrays that each")
    print("step's graph held (they are freed each batch here, but a kept reference would keep them all).")
    print(f"\n(done in {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
