"""Per-step cost of each path of the benchmark MLP against the floor, in short alternating blocks.

``mnist_mlp.py`` pairs whole epochs, a second or more each: on a shared machine whose speed
drifts within seconds, one slow epoch moves a ratio by several percent. Here every
implementation runs in one process from the same weights, in blocks of ``--steps`` training
steps, each in turn (the order reversed every other round), for ``--blocks`` rounds; the figure
is the median over rounds of each block's time over the floor's block in the same round, with its
quartiles. A drift slower than a round (a few tens of milliseconds) hits every path alike.

Each block continues its implementation's training where the last one stopped (a new shuffled
epoch each block); the warm-up is ``mnist_mlp.WARMUP_STEPS`` steps.

Usage:
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/paired_blocks.py --hidden 128 --batch-size 32
    python benchmarks/paired_blocks.py --hidden 512 --batch-size 128 --blocks 16 --only numpy,needle-course
"""
import argparse
import os
import sys
import time

BENCHMARK_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(BENCHMARK_DIR))
sys.path.insert(0, BENCHMARK_DIR)

import numpy as np  # noqa: E402

from mnist_mlp import IMPLEMENTATIONS, warmed_up_runners  # noqa: E402
from workload import Workload, load_mnist  # noqa: E402

DEFAULT_ROWS = ("numpy", "needle-course", "needle", "needle-compiled")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=150, help="training steps a block")
    parser.add_argument("--blocks", type=int, default=40, help="rounds of one block of each implementation")
    parser.add_argument("--only", default=",".join(DEFAULT_ROWS), help="implementations, the floor (numpy) first")
    args = parser.parse_args(argv)
    args.only = args.only.split(",")
    if args.only[0] != "numpy" or any(key not in IMPLEMENTATIONS for key in args.only):
        parser.error(f"--only: numpy first, then any of {', '.join(sorted(IMPLEMENTATIONS))}")
    return args


def block_seconds(runner, steps):
    """Seconds a step over ``steps`` steps of ``runner``."""
    start = time.perf_counter()
    runner.train_steps(steps)
    return (time.perf_counter() - start) / steps


def measure(workload, keys, steps, blocks):
    """``{key: (name, seconds a step of each block)}`` for the implementations ``keys`` (the
    floor first) on ``workload``, in ``blocks`` rounds of ``steps``-step blocks."""
    runners = warmed_up_runners(workload, keys)
    seconds = {runner.key: (runner.name, []) for runner in runners}
    for round_index in range(blocks):
        for runner in runners if round_index % 2 == 0 else runners[::-1]:
            seconds[runner.key][1].append(block_seconds(runner, steps))
    return seconds


def ratios_to_floor(seconds):
    """``{key: (name, median seconds a step, median ratio to the floor, first quartile, third quartile)}``."""
    floor = np.array(seconds["numpy"][1])
    summary = {}
    for key, (name, times) in seconds.items():
        times = np.array(times)
        ratios = times / floor
        q1, q3 = np.quantile(ratios, [0.25, 0.75])
        summary[key] = (name, float(np.median(times)), float(np.median(ratios)), float(q1), float(q3))
    return summary


def main(argv=None):
    args = parse_args(argv)
    (train_images, train_labels), (test_images, test_labels), _ = load_mnist()
    workload = Workload(
        train_images, train_labels, test_images, test_labels,
        hidden=args.hidden, batch_size=args.batch_size, epochs=1, lr=0.1, device="cpu",
    )
    summary = ratios_to_floor(measure(workload, args.only, args.steps, args.blocks))
    print(f"H={args.hidden}, batch {args.batch_size}: {args.blocks} rounds of {args.steps}-step blocks, one process")
    print(f"   {'implementation':28s} {'us/step':>8s}  {'vs floor (median of blocks)':>28s}  quartiles")
    for name, step, ratio, q1, q3 in summary.values():
        print(f"   {name:28s} {step * 1e6:8.1f}  {ratio:27.3f}x  {q1:.3f}-{q3:.3f}")


if __name__ == "__main__":
    main()
