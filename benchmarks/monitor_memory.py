"""What the MemoryMonitor itself holds as a run grows: bytes per monitored step.

A small training step (a matrix product, a sum, backward) runs ``--steps`` times after a
warm-up that fills the monitor's recent window. Two measurements:

- tracemalloc: bytes allocated and still held by ``trainers/`` code between the end of the
  warm-up and the end of the run (the monitor's own memory), divided by the steps;
- RSS: the process's resident set growth over the same steps, with the monitor and, in the
  same process beforehand, without it (the loop's own drift).

    python benchmarks/monitor_memory.py [--steps 100000] [--warmup 3000]
"""
import argparse
import gc
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import needle as ndl  # noqa: E402
from trainers import MemoryMonitor  # noqa: E402
from trainers.monitor.memory import HostMemory  # noqa: E402


def make_step():
    rng = np.random.default_rng(0)
    w = ndl.Tensor(rng.standard_normal((8, 4)).astype("float32"))
    x = ndl.Tensor(rng.standard_normal((16, 8)).astype("float32"), requires_grad=False)

    def step():
        loss = (x @ w).sum()
        loss.backward(create_graph=False)

    return step


def run(step, monitor, count):
    if monitor is None:
        for _ in range(count):
            step()
    else:
        for _ in range(count):
            step()
            monitor.step()


def rss_growth(step, monitor, warmup, steps, host):
    run(step, monitor, warmup)
    gc.collect()
    before = host.rss()
    run(step, monitor, steps)
    gc.collect()
    return host.rss() - before


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--warmup", type=int, default=3_000)
    args = parser.parse_args()
    step, host = make_step(), HostMemory()
    started = time.perf_counter()

    plain = rss_growth(step, None, args.warmup, args.steps, host)
    monitor = MemoryMonitor()
    watched = rss_growth(step, monitor, args.warmup, args.steps, host)

    tracemalloc.start()
    traced = MemoryMonitor()
    run(step, traced, args.warmup)
    gc.collect()
    only_trainers = [tracemalloc.Filter(True, str(Path(__file__).resolve().parents[1] / "trainers" / "*"))]
    first = tracemalloc.take_snapshot().filter_traces(only_trainers)
    run(step, traced, args.steps)
    gc.collect()
    last = tracemalloc.take_snapshot().filter_traces(only_trainers)
    tracemalloc.stop()
    held_before = sum(s.size for s in first.statistics("filename"))
    held_after = sum(s.size for s in last.statistics("filename"))
    top = last.compare_to(first, "lineno")[:3]

    print(f"MemoryMonitor over {args.steps:,} monitored steps (after {args.warmup:,} warm-up steps), "
          f"{time.perf_counter() - started:.0f} s in all:")
    print(f"  monitor's own memory (tracemalloc, trainers/): {held_before / 1e3:.1f} KB -> {held_after / 1e3:.1f} KB, "
          f"{(held_after - held_before) / args.steps:+.3f} bytes/step")
    print(f"  process RSS growth with the monitor:    {watched / 1e3:+.0f} KB, {watched / args.steps:+.3f} bytes/step")
    print(f"  process RSS growth without the monitor: {plain / 1e3:+.0f} KB, {plain / args.steps:+.3f} bytes/step")
    print(f"  history: {monitor.history}")
    print("  largest changes in trainers/ allocations:")
    for stat in top:
        print(f"    {stat}")


if __name__ == "__main__":
    main()
