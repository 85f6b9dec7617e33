"""Graph leaks, seen and cured: the lecture's loop and a small MNIST training loop.

Run from a fresh checkout (a few seconds):  python examples/leak_demo.py

Part 1 is the lecture's loop ``sum_loss = sum_loss + x * x``: it never calls backward(), so
every iteration's two graph nodes stay chained to the next; ``.detach()`` keeps it flat.
Part 2 trains a small MLP on MNIST with ``total_loss += loss`` (the classic leak) and then with
``total_loss += float(loss.numpy())``. Part 3 runs a recurrent cell over a stream of batches,
carrying its hidden state ``h`` from batch to batch without ``detach()``, then with
``h = h.detach()`` once per batch (truncated back-propagation through time). A MemoryMonitor
steps once per iteration and warns, with the line to fix, a few iterations after a leak starts.

The demo leaves Python's warning filters as you set them: ``NEEDLE_WARNINGS=error python
examples/leak_demo.py`` stops at the first leak.
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


def table(title, monitor, rows):
    print(f"\n{title}")
    print(f"  {'iteration':>9}  {'live graph nodes':>16}  {'array memory':>12}")
    for i in rows:
        record = monitor.history[i]
        print(f"  {record.iteration:>9}  {record.live_nodes:>16}  {record.live_bytes / 1e3:>9.1f} KB")


# ---- part 1: the lecture's loop -------------------------------------------------------------------
def lecture_loop(variant):
    x = ndl.Tensor([2.0], requires_grad=True)
    sum_loss = 0
    with MemoryMonitor() as monitor:
        for i in range(100):
            if variant == "leaky":
                sum_loss = sum_loss + x * x
            elif variant == "detach":
                sum_loss = (sum_loss + x * x).detach()
            else:
                with ndl.no_grad():
                    sum_loss = sum_loss + x * x
            monitor.step()
    return monitor


# ---- part 3: a recurrent state carried across batches ------------------------------------------------
class TanhCell(nn.Module):
    """A hand-written recurrent cell: h' = tanh(W_ih x + W_hh h)."""

    def __init__(self, features, hidden):
        super().__init__()
        self.ih = nn.Linear(features, hidden)
        self.hh = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x, h):
        return ndl.ops.tanh(self.ih(x) + self.hh(h))


def recurrent(batches, detach):
    np.random.seed(0)
    cell, head = TanhCell(784, 32), nn.Linear(32, 10)
    optimizer = optim.SGD(cell.parameters() + head.parameters(), lr=0.05)
    loss_fn = nn.SoftmaxLoss()
    h = ndl.Tensor(np.zeros((32, 32), dtype="float32"), requires_grad=False)
    with MemoryMonitor() as monitor:
        for x, y in batches:
            if detach:
                h = h.detach()
            h = cell(x, h)
            loss = loss_fn(head(h), y)
            optimizer.reset_grad()
            loss.backward()
            optimizer.step()
            monitor.step()
    return monitor


# ---- part 2: MNIST ------------------------------------------------------------------------------
def mnist_batches(count=512, batch_size=32):
    files = needle.data.mnist(root=REPO_DATA)
    dataset = needle.data.MNISTDataset(str(files.train_images), str(files.train_labels))
    images = dataset.images[:count]
    labels = dataset.labels[:count].astype("int64")
    return [
        (
            ndl.Tensor(images[start : start + batch_size], requires_grad=False),
            ndl.Tensor(labels[start : start + batch_size], dtype="int64", requires_grad=False),
        )
        for start in range(0, count, batch_size)
    ]


def train(batches, epochs, fixed):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.SoftmaxLoss()
    with MemoryMonitor() as monitor:
        for epoch in range(epochs):
            total_loss = 0.0
            for x, y in batches:
                optimizer.reset_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                if fixed:
                    total_loss += float(loss.numpy())
                else:
                    total_loss += loss
                monitor.step()
            print(f"  epoch {epoch}: mean loss {float(total_loss) / len(batches):.3f}")
    return monitor


def show_warning(message, category, filename, lineno, file=None, line=None):
    """Print warnings on stdout, so that they appear in order with the tables."""
    print("\n" + warnings.formatwarning(message, category, filename, lineno, line), end="")


def main():
    started = time.perf_counter()
    warnings.showwarning = show_warning  # where warnings are printed; the user's filters stay as they are

    print("=" * 78)
    print("Part 1: the lecture's loop, 100 iterations of  sum_loss = sum_loss + x * x")
    print("=" * 78)
    print("\nNo backward() runs here and the sum reads no weight, so it cannot be micro-batches summed for")
    print("a later backward(): after 4 iterations without one, the monitor locates the chain:")
    leaky = lecture_loop("leaky")
    leaky.clear_finding()  # the finding keeps the leaked graph alive (to show it); let it go
    print("\nThe .detach() fix keeps nothing (each iteration's two nodes are dropped at once), and no_grad")
    print("builds none at all; neither draws a warning.")
    detached = lecture_loop("detach")
    quiet = lecture_loop("no_grad")
    rows = [0, 1, 9, 49, 99]
    table("before:  sum_loss = sum_loss + x * x", leaky, rows)
    table("after:   sum_loss = (sum_loss + x * x).detach()", detached, rows)
    table("or:      with ndl.no_grad(): sum_loss = sum_loss + x * x   (no warning)", quiet, rows)
    growth = (leaky.history[-1].live_nodes - leaky.history[0].live_nodes) / 99
    print(f"\n  before: {growth:.0f} graph nodes more per iteration, {leaky.history[-1].live_nodes} after 100 "
          "iterations; after: flat.")
    del leaky, detached, quiet
    gc.collect()

    print()
    print("=" * 78)
    print("Part 2: MNIST, 512 images, MLP 784-64-10, SGD, 16 batches x 3 epochs")
    print("=" * 78)
    batches = mnist_batches()
    print("\nbefore:  total_loss += loss")
    leaky = train(batches, epochs=3, fixed=False)
    leaky.clear_finding()
    gc.collect()  # free the leaky run's graphs before the fixed run starts counting
    print("\nafter:   total_loss += float(loss.numpy())")
    fixed = train(batches, epochs=3, fixed=True)
    rows = [0, 5, 10, 15, 16, 31, 47]
    table("before:  total_loss += loss", leaky, rows)
    table("after:   total_loss += float(loss.numpy())", fixed, rows)
    steps = len(leaky.history[:16]) - 1
    nodes = (leaky.history[15].live_nodes - leaky.history[0].live_nodes) / steps
    nbytes = (leaky.history[15].live_bytes - leaky.history[0].live_bytes) / steps
    print(f"\n  before: about {nodes:.0f} graph nodes and {nbytes / 1e3:.0f} KB more per iteration within an epoch"
          " (each epoch's new total_loss lets the last epoch's graphs go)")
    epochs = [fixed.history[i : i + 16] for i in range(0, 48, 16)]
    peaks = ", ".join(str(max(r.live_nodes for r in epoch)) for epoch in epochs)
    print(f"  after:  peak graph nodes per epoch {peaks}: flat")
    print()
    print("before: " + leaky.summary())
    print("after:  " + fixed.summary())
    del leaky, fixed
    gc.collect()

    print()
    print("=" * 78)
    print("Part 3: a recurrent cell over 16 batches, its hidden state h carried from batch to batch")
    print("=" * 78)
    print("\nbefore:  h = cell(x, h)                  (every batch's graph stays reachable through h)")
    carried = recurrent(batches, detach=False)
    carried.clear_finding()
    gc.collect()
    print("\nafter:   h = h.detach(); h = cell(x, h)  (truncated back-propagation through time)")
    detached = recurrent(batches, detach=True)
    rows = [0, 5, 10, 15]
    table("before:  h carried without detach()", carried, rows)
    table("after:   h = h.detach() once per batch", detached, rows)
    print(f"\n(done in {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
