"""Epoch time in IEEE arithmetic against subnormals flushed to zero, per implementation, paired.

Late in an epoch the benchmark MLP's arrays fill with subnormal floats (softmax probabilities
below 1.2e-38 and the gradients made from them, velocities decaying to zero), which x86 CPUs
compute through a slow path. ``ndl.set_flush_denormal(True)`` turns that off for the thread.
This script trains each implementation of ``mnist_mlp.py`` for one epoch from the same initial
weights and batch order in both modes, the two modes back to back (their order alternating
between repeats), and reports the medians, the paired ratio flush/IEEE, and each mode's
paired ratio against the floor. It also counts the floor's subnormal velocities at the end of
an IEEE epoch, the cause.

Usage:
    OPENBLAS_NUM_THREADS=1 python benchmarks/denormals.py --preset cpu --markdown
    OPENBLAS_NUM_THREADS=1 python benchmarks/denormals.py --hidden 128 --batch-size 32 --only numpy,needle-compiled
"""
import argparse
import os
import sys

import numpy as np

BENCHMARK_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(BENCHMARK_DIR))
sys.path.insert(0, BENCHMARK_DIR)

import needle  # noqa: E402
from mnist_mlp import IMPLEMENTATIONS, PRESETS, ROW_ORDER, machine_description, warmed_up_runners  # noqa: E402
from reference_torch import torch_available  # noqa: E402
from timing import Stopwatch, median  # noqa: E402
from workload import Workload, load_mnist  # noqa: E402

MODES = (False, True)  # IEEE, flushed


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--preset", choices=["cpu"], help="H512/b128 and H128/b32, as mnist_mlp.py --preset cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default=",".join(ROW_ORDER), help=f"comma-separated subset of {','.join(ROW_ORDER)}")
    parser.add_argument("--markdown", action="store_true", help="also print a markdown table")
    args = parser.parse_args(argv)
    args.only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(args.only) - set(IMPLEMENTATIONS))
    if unknown:
        parser.error(f"--only got {unknown}; choose from {sorted(IMPLEMENTATIONS)}")
    if "numpy" not in args.only:
        parser.error("--only must include numpy: the ratios are against the floor")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return args


def set_mode(flush):
    if not needle.set_flush_denormal(flush):
        sys.exit("needle cannot set this CPU's denormal mode here (its C extension is not built: pip install -e .)")
    if torch_available()[0]:
        import torch

        torch.set_flush_denormal(flush)


def subnormal_count(array):
    array = np.asarray(array)
    return int(np.count_nonzero((array != 0) & (np.abs(array) < np.finfo(array.dtype).tiny)))


def run_config(workload, keys, repeats, seed):
    """``(times, names, subnormals)``: ``{key: {mode: [seconds per epoch]}}``, ``{key: row name}``, and
    the floor's count of subnormal velocities (of how many) after each IEEE epoch."""
    initial = workload.initial_weights()
    runners = warmed_up_runners(workload, keys)
    times = {runner.key: {mode: [] for mode in MODES} for runner in runners}
    subnormals = []
    for repeat in range(repeats):
        order = MODES if repeat % 2 == 0 else MODES[::-1]
        for runner in runners:
            for flush in order:
                set_mode(flush)
                np.random.seed(seed + repeat)  # the same batch order in both modes
                runner.reset(tuple(w.copy() for w in initial))
                watch = Stopwatch(runner.synchronize)
                with watch:
                    runner.train_epoch()
                times[runner.key][flush].append(watch.seconds)
                if runner.key == "numpy" and not flush:
                    subnormals.append((subnormal_count(runner.flat_velocities), runner.flat_velocities.size))
                mode = "flushed" if flush else "IEEE"
                print(f"   repeat {repeat + 1}/{repeats} {runner.name:26s} {mode:8s} {watch.seconds:7.3f} s/epoch", flush=True)
    set_mode(False)
    return times, {runner.key: runner.name for runner in runners}, subnormals


def rows_of(times, names):
    floor = times["numpy"]
    rows = []
    for key, record in times.items():
        ieee, flushed = record[False], record[True]
        rows.append({
            "name": names[key],
            "ieee": median(ieee),
            "flushed": median(flushed),
            "gain": median([f / i for f, i in zip(flushed, ieee)]),
            "ieee_vs_floor": median([i / f for i, f in zip(ieee, floor[False])]),
            "flushed_vs_floor": median([i / f for i, f in zip(flushed, floor[True])]),
        })
    return rows


def main(argv=None):
    args = parse_args(argv)
    keys = [key for key in ROW_ORDER if key in args.only and (key != "torch" or torch_available()[0])]
    (train_images, train_labels), (test_images, test_labels), _ = load_mnist()
    for line in machine_description("cpu"):
        print(line)
    print(f"{args.repeats} repeats of one epoch per implementation and mode, BLAS threads "
          f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    configs = [(h, b) for h, b, _ in PRESETS["cpu"]] if args.preset else [(args.hidden, args.batch_size)]
    tables = []
    for hidden, batch_size in configs:
        title = f"H={hidden}, batch {batch_size}"
        print(f"\n-- {title}", flush=True)
        workload = Workload(train_images, train_labels, test_images, test_labels, hidden=hidden,
                            batch_size=batch_size, epochs=1, lr=args.lr, device="cpu", seed=args.seed)
        times, names, subnormals = run_config(workload, keys, args.repeats, args.seed)
        rows = rows_of(times, names)
        counts = ", ".join(str(count) for count, _ in subnormals)
        print(f"\n== {title}: subnormal values among the floor's {subnormals[0][1]} velocities after each IEEE "
              f"epoch: {counts}")
        print(f"   {'implementation':26s} {'IEEE s':>8s} {'flushed s':>9s} {'flushed/IEEE':>12s} "
              f"{'IEEE vs floor':>13s} {'flushed vs floor':>16s}")
        for row in rows:
            print(f"   {row['name']:26s} {row['ieee']:8.3f} {row['flushed']:9.3f} {row['gain']:11.2f}x "
                  f"{row['ieee_vs_floor']:12.2f}x {row['flushed_vs_floor']:15.2f}x")
        tables.append((title, rows))
    if args.markdown:
        print("\n| config | implementation | IEEE s/epoch | flushed s/epoch | flushed/IEEE (paired) "
              "| vs floor, IEEE (paired) | vs floor, flushed (paired) |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for title, rows in tables:
            for row in rows:
                print(f"| {title} | {row['name']} | {row['ieee']:.3f} | {row['flushed']:.3f} | {row['gain']:.2f}x "
                      f"| {row['ieee_vs_floor']:.2f}x | {row['flushed_vs_floor']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
