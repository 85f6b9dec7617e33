"""The optimizer step of an ``ndl.compile`` replay against a full ``opt.step()``, paired.

Captures the benchmark's 784 -> 128 -> 10 MLP step (SGD, momentum 0.9, lr 0 so the weights stay),
then times, in alternating blocks, ``SGD.step`` and the replay's resolved path
(``needle.compiler.optimizer_replay``) over the same arrays; prints the medians and the paired ratio.

Usage:
    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python benchmarks/optimizer_replay.py
"""
import timeit

import numpy as np

import needle as ndl


def main(blocks=15, calls=200):
    model = ndl.nn.Sequential(ndl.nn.Linear(784, 128), ndl.nn.ReLU(), ndl.nn.Linear(128, 10))
    opt = ndl.optim.SGD(model.parameters(), lr=0.0, momentum=0.9)
    loss_fn = ndl.nn.SoftmaxLoss()

    @ndl.compile
    def step(x, y):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    x = ndl.Tensor(np.random.rand(32, 784).astype("float32"))
    y = ndl.Tensor(np.random.randint(0, 10, 32))
    step(x, y), step(x, y)  # capture, then one replay, which resolves the optimizer's arrays
    resolved = next(iter(step._plans.values())).plan.runs[-1].fast
    full = type(opt).step.__get__(opt)
    full_times, resolved_times = [], []
    for _ in range(blocks):
        full_times.append(timeit.timeit(full, number=calls) / calls * 1e6)
        resolved_times.append(timeit.timeit(resolved, number=calls) / calls * 1e6)
    ratios = sorted(r / f for f, r in zip(full_times, resolved_times))
    middle = blocks // 2
    print(f"full SGD.step median {sorted(full_times)[middle]:.1f} us, resolved {sorted(resolved_times)[middle]:.1f} us, "
          f"paired ratio median {ratios[middle]:.2f}x (min {ratios[0]:.2f}x, max {ratios[-1]:.2f}x)")


if __name__ == "__main__":
    main()
