"""Per-node cost: a fixed-batch MLP training step, repeated (for whole-process timings, before/after a change).

    PYTHONPATH=. python benchmarks/mlp_step.py [--steps N] [--batch B] [--create-graph]

A small MLP on one fixed batch, so that the Python work per node (op dispatch, counters) is a
large share of each step: the case where bookkeeping per node shows most. Prints the median
step time of the run.
"""
import argparse
import time

import numpy as np

import needle as ndl
from needle import nn


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--create-graph", action="store_true", help="use loss.backward() instead of create_graph=False")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = ndl.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.SoftmaxLoss()
    x = ndl.Tensor(rng.standard_normal((args.batch, 64)).astype("float32"), requires_grad=False)
    y = ndl.Tensor(rng.integers(0, 10, args.batch), dtype="int64", requires_grad=False)
    backward_kwargs = {} if args.create_graph else {"create_graph": False}
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        optimizer.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward(**backward_kwargs)
        optimizer.step()
        times.append(time.perf_counter() - start)
    print(f"median step {np.median(times) * 1e6:.1f} us over {args.steps} steps (batch {args.batch})")


if __name__ == "__main__":
    main()
