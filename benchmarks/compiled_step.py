"""Per-step time of an ``ndl.compile`` replay against the hand-written numpy floor, paired.

Both train the benchmark's 784 -> H -> 10 MLP (SGD, momentum 0.9) on the same MNIST batches,
fed directly (no DataLoader, so the figure is the step itself). Blocks of steps alternate,
floor then compiled, and the ratio is taken block by block: the median of those ratios is the
figure to quote on a shared machine.

Usage:
    OPENBLAS_NUM_THREADS=1 python benchmarks/compiled_step.py --hidden 128 --batch-size 32
"""
import argparse
import os
import sys
import time

import numpy as np

BENCHMARK_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(BENCHMARK_DIR))
sys.path.insert(0, BENCHMARK_DIR)

from floor_numpy import FloorMLP  # noqa: E402
from needle_compiled_mlp import NeedleCompiledMLP  # noqa: E402
from timing import median  # noqa: E402
from workload import Workload, load_mnist  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--steps", type=int, default=100, help="steps per block")
    args = parser.parse_args(argv)
    (train_images, train_labels), (test_images, test_labels), _ = load_mnist()
    workload = Workload(
        train_images, train_labels, test_images, test_labels,
        hidden=args.hidden, batch_size=args.batch_size, epochs=1, lr=0.1, device="cpu",
    )
    floor, compiled = FloorMLP(workload), NeedleCompiledMLP(workload)
    floor.reset(workload.initial_weights())
    compiled.reset(workload.initial_weights())
    ndl = compiled.ndl
    order = np.random.RandomState(0).permutation(train_images.shape[0])
    starts = range(0, args.batch_size * args.steps, args.batch_size)
    batches = [order[s : s + args.batch_size] for s in starts]
    tensors = [
        (ndl.Tensor(train_images[b], requires_grad=False), ndl.Tensor(train_labels[b], requires_grad=False))
        for b in batches
    ]

    def floor_block():
        for indices in batches:
            floor._step(indices)

    def compiled_block():
        for x, y in tensors:
            compiled._step(x, y)

    floor_block(), compiled_block()  # warm-up; the compiled step captures here
    floor_times, compiled_times, ratios = [], [], []
    for _ in range(args.blocks):
        start = time.perf_counter()
        floor_block()
        middle = time.perf_counter()
        compiled_block()
        end = time.perf_counter()
        floor_times.append((middle - start) / args.steps)
        compiled_times.append((end - middle) / args.steps)
        ratios.append(compiled_times[-1] / floor_times[-1])
    print(f"H={args.hidden}, batch {args.batch_size}: {args.blocks} blocks of {args.steps} steps, "
          f"BLAS threads {os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    print(f"  floor     median {median(floor_times) * 1e6:8.1f} us/step")
    print(f"  compiled  median {median(compiled_times) * 1e6:8.1f} us/step")
    print(f"  paired ratio compiled/floor: median {median(ratios):.3f}x (min {min(ratios):.3f}x, max {max(ratios):.3f}x)")


if __name__ == "__main__":
    main()
