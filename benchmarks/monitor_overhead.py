"""What the MemoryMonitor costs: the MNIST MLP of examples/train_mnist.py, monitored and not.

Both loops are the same hand-written training loop (Adam, hidden 256, batch 128 by default, as
the example's defaults); the monitored one calls ``monitor.step()`` once per iteration. The two
run interleaved, one epoch each per repeat and in alternating order, so load on a shared machine
hits both alike; the report gives the median seconds per epoch of each, the ratio of the
medians, and the cost of one ``monitor.step()`` timed alone.

    python benchmarks/monitor_overhead.py [--repeats 5] [--hidden 256] [--batch-size 128]
"""
import argparse
import statistics
import timeit
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import needle as ndl  # noqa: E402
from needle import nn, optim  # noqa: E402
from needle.data import DataLoader, NDArrayDataset, mnist, parse_mnist  # noqa: E402
from trainers import MemoryMonitor  # noqa: E402


def train_epoch(model, loss_fn, optimizer, loader, monitor):
    for images, labels in loader:
        optimizer.reset_grad()
        loss = loss_fn(model(images), labels)
        loss.backward(create_graph=False)
        optimizer.step()
        if monitor is not None:
            monitor.step()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    device = ndl.cpu() if args.device == "cpu" else ndl.cuda()
    synchronize = device.xp.cuda.Device().synchronize if args.device == "cuda" else (lambda: None)

    files = mnist()
    images, labels = parse_mnist(files.train_images, files.train_labels)
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(784, args.hidden, device=device), nn.ReLU(), nn.Linear(args.hidden, 10, device=device))
    loss_fn = nn.SoftmaxLoss()
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(NDArrayDataset(images, labels), args.batch_size, shuffle=True, device=device)
    monitor = MemoryMonitor(device=device)

    train_epoch(model, loss_fn, optimizer, loader, monitor)  # warm-up (and CuPy's kernel cache)
    seconds = {"unmonitored": [], "monitored": []}
    pair = [("unmonitored", None), ("monitored", monitor)]
    for repeat in range(args.repeats):
        # NOTE: the order alternates, so a machine slowing down (or warming up) over the run
        # does not always fall on the same side.
        for name, watcher in pair if repeat % 2 == 0 else pair[::-1]:
            synchronize()
            start = time.perf_counter()
            train_epoch(model, loss_fn, optimizer, loader, watcher)
            synchronize()
            seconds[name].append(time.perf_counter() - start)
            print(f"  repeat {repeat + 1}/{args.repeats} {name:12s} {seconds[name][-1]:.3f} s/epoch", flush=True)
    plain, watched = (statistics.median(seconds[k]) for k in ("unmonitored", "monitored"))
    steps = len(loader)
    print(f"\nMNIST MLP 784-{args.hidden}-10, batch {args.batch_size}, Adam, {steps} steps/epoch, {args.device}, "
          f"median of {args.repeats}:")
    print(f"  unmonitored  {plain:.3f} s/epoch")
    print(f"  monitored    {watched:.3f} s/epoch  ({(watched - plain) / steps * 1e6:+.1f} us/step)")
    print(f"  overhead     {100 * (watched / plain - 1):+.2f}%  (ratio of medians {watched / plain:.4f})")
    issued = ", ".join(f"{line.strip()}" for line in monitor.summary().splitlines() if "warnings:" in line)
    print(f"  monitor warnings given: {issued}; leak diagnosis state at the end: {monitor.diagnosis.state}")
    alone = min(timeit.repeat(monitor.step, number=2000, repeat=5)) / 2000
    print(f"  one monitor.step() alone: {alone * 1e6:.1f} us = {100 * alone * steps / plain:.2f}% of an unmonitored epoch")


if __name__ == "__main__":
    main()
