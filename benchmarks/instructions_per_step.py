"""Instructions per training step of the benchmark MLP, counted by valgrind: a measure noise cannot move.

On a shared machine a 3% change in per-step Python overhead hides in the timing noise of
``mnist_mlp.py``. Instruction counts are deterministic: this runs the step loop under
``valgrind --tool=callgrind`` twice (0 steps and ``--steps``), subtracts, and prints the
instructions of one step split by where they run: the Python interpreter (the framework's own
overhead), numpy's dispatch and loops, BLAS (the arithmetic of the products) and the C library.
Instructions are not time (a pass over a large array costs its memory traffic), so use it to
compare the Python overhead of two versions, and timings for the rest. ``--cache`` adds
callgrind's cache model (a 48 KiB L1 and a 2 MiB last level, the L2 of the Intel Xeon the
figures in docs/benchmarks.md came from) and prints the last-level data misses of one step:
how much of a step's memory traffic leaves the core's cache, again without noise.

The data is random and MNIST-shaped, so no download is needed; the step is the one
``needle_mlp.NeedleMLP`` times (``--course`` counts the course's ``loss.backward()`` step of
``needle_mlp.NeedleCourseBackwardMLP``, ``--compiled`` the ``ndl.compile`` replay of
``needle_compiled_mlp.NeedleCompiledMLP``, ``--floor`` the hand-written numpy floor).

Usage:
    python benchmarks/instructions_per_step.py --hidden 128 --batch-size 32 --steps 60
    python benchmarks/instructions_per_step.py --course
    python benchmarks/instructions_per_step.py --compiled
    python benchmarks/instructions_per_step.py --floor
    python benchmarks/instructions_per_step.py --compiled --cache
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

BENCHMARK_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCHMARK_DIR)
# The steps besides the default fast path, one flag each.
PATHS = ("floor", "course", "compiled")
# Where each instruction ran, by the shared object callgrind names.
PLACES = (("python", "libpython"), ("numpy", "_multiarray_umath"), ("blas", "openblas"), ("libc", "libc.so"))
# --cache: callgrind's cache model, sized as the core of the machine the documented figures
# came from (size, associativity, line size in bytes): 32 KiB L1i, 48 KiB L1d, 2 MiB L2 as the last level.
CACHE_MODEL = ("--cache-sim=yes", "--I1=32768,8,64", "--D1=49152,12,64", "--LL=2097152,16,64")
# The events read per shared object: instructions, and with --cache the last-level data misses.
EVENTS = ("Ir",)
CACHE_EVENTS = ("Ir", "DLmr", "DLmw")


def build_model(args):
    """The benchmark's model for the step ``args`` names (``--floor``, ``--course``, ``--compiled`` or
    the fast path), on random MNIST-shaped data, after three warm-up steps."""
    sys.path.insert(0, REPO_ROOT)
    sys.path.insert(0, BENCHMARK_DIR)
    import numpy as np

    from workload import Workload

    rng = np.random.default_rng(0)
    images = rng.random((4096, 784), dtype=np.float32)
    labels = rng.integers(0, 10, 4096).astype(np.uint8)
    workload = Workload(images, labels, images[:10], labels[:10], hidden=args.hidden,
                        batch_size=args.batch_size, epochs=1, lr=0.1, device="cpu")
    np.random.seed(0)
    if args.floor:
        from floor_numpy import FloorMLP as Model
    elif args.course:
        from needle_mlp import NeedleCourseBackwardMLP as Model
    elif args.compiled:
        from needle_compiled_mlp import NeedleCompiledMLP as Model
    else:
        from needle_mlp import NeedleMLP as Model
    model = Model(workload)
    model.reset(workload.initial_weights())
    model.train_steps(3)
    return model


def run_steps(args):
    """The child process: a model, three warm-up steps, then ``args.steps`` steps (nothing printed)."""
    build_model(args).train_steps(args.steps)


def counted(args, steps, folder):
    """Counts by (shared object, event) for a child run of ``steps`` steps (events: ``Ir``, and with
    ``--cache`` the last-level data read and write misses ``DLmr``, ``DLmw``)."""
    out = os.path.join(folder, f"callgrind.{steps}.out")
    child = [sys.executable, os.path.abspath(__file__), "--child", "--steps", str(steps),
             "--hidden", str(args.hidden), "--batch-size", str(args.batch_size)] + [f"--{path}" for path in PATHS if getattr(args, path)]
    env = dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    model = list(CACHE_MODEL) if args.cache else []
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + model + child,
                   env=env, check=True, capture_output=True)
    events = CACHE_EVENTS if args.cache else EVENTS
    report = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", f"--show={','.join(events)}", out],
                            check=True, capture_output=True, text=True).stdout
    by_object = collections.Counter()  # (shared object, event) -> count
    for line in report.splitlines():
        match = re.match(r"\s*((?:(?:[\d,]+ \([^)]*\)|\.)\s+)+).*\[(.*)\]$", line)
        if not match:
            continue
        counts = re.findall(r"([\d,]+) \([^)]*\)|(\.)", match.group(1))
        for event, (number, dot) in zip(events, counts):
            by_object[(os.path.basename(match.group(2)), event)] += 0 if dot else int(number.replace(",", ""))
    return by_object


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--floor", action="store_true", help="count the hand-written numpy floor instead of needle")
    parser.add_argument("--course", action="store_true", help="count the course's loss.backward() step, not the fast path's")
    parser.add_argument("--compiled", action="store_true", help="count the ndl.compile replay of the course step")
    parser.add_argument("--cache", action="store_true", help="also count last-level (2 MiB) data cache misses a step")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return run_steps(args)
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        parser.error("needs valgrind and callgrind_annotate (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as folder:
        before, after = counted(args, 0, folder), counted(args, args.steps, folder)
    per_step = {key: (after[key] - before.get(key, 0)) / args.steps for key in after}
    instructions = {name: count for (name, event), count in per_step.items() if event == "Ir"}
    total = sum(instructions.values())
    parts = [f"{label} {sum(v for name, v in instructions.items() if key in name) / 1e3:.1f}K" for label, key in PLACES]
    who = "floor" if args.floor else "needle backward()" if args.course else "needle compiled" if args.compiled else "needle"
    print(f"{who} H={args.hidden} batch {args.batch_size}: {total / 1e3:.1f}K instructions a step ({', '.join(parts)})")
    if args.cache:
        reads = sum(count for (_, event), count in per_step.items() if event == "DLmr")
        writes = sum(count for (_, event), count in per_step.items() if event == "DLmw")
        print(f"  last-level (2 MiB) data misses a step: {(reads + writes) / 1e3:.1f}K ({reads / 1e3:.1f}K reads, {writes / 1e3:.1f}K writes)")


if __name__ == "__main__":
    main()
