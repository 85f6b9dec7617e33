#!/usr/bin/env python
"""``split`` then every item read once: how backward's time grows with the number of items.

Splits an (n, 64) tensor along axis 0, adds the n items up, and times ``backward()`` on both
paths (``create_graph=False``, leaves only, and ``create_graph=True``, the course's every-node path
with gradients that keep their graph).
Linear work means the time per item stays flat as n doubles.

    python benchmarks/split_backward.py               # n = 100, 200, 400, 800
    python benchmarks/split_backward.py --sizes 50 100 --repeats 5
"""
import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

if importlib.util.find_spec("needle") is None:  # run from a checkout without pip install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import needle as ndl  # noqa: E402
from needle import ops  # noqa: E402


def backward_seconds(items: int, create_graph: bool) -> float:
    x = ndl.Tensor(np.random.rand(items, 64).astype(np.float32))
    pieces = ops.split(x, 0)
    total = pieces[0]
    for index in range(1, items):
        total = total + pieces[index]
    loss = ops.summation(total)
    start = time.perf_counter()
    loss.backward(create_graph=create_graph)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 200, 400, 800])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'items':>6} {'path':>8} {'median ms':>10} {'us per item':>12}")
    for items in args.sizes:
        for create_graph, path in ((False, "arrays"), (True, "course")):
            median = statistics.median(backward_seconds(items, create_graph) for _ in range(args.repeats))
            print(f"{items:>6} {path:>8} {median * 1e3:>10.2f} {median / items * 1e6:>12.1f}")


if __name__ == "__main__":
    main()
