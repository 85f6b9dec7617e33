"""Speed benchmark: one epoch of a 784 -> H -> 10 MLP on MNIST, needle against its floor and PyTorch.

The implementations of the same model, hyperparameters and initial weights run in one
invocation, interleaved per repeat (each in turn, then again, ...) so that machine noise hits
all of them alike. One row per path, in this order:

- ``needle-course``: the course API (``nn.Sequential``, ``nn.SoftmaxLoss``, ``optim.SGD``,
  ``DataLoader``) with the default ``loss.backward()``, as every hand-written loop calls it;
- ``needle``: the same with the fast path, ``loss.backward(create_graph=False)``;
- (compiled: the row of ``ndl.compile``'s captured step goes here, see ``ROW_ORDER``);
- ``torch``: eager PyTorch, when it imports (``pip install 'needle-dl[bench]'``);
- ``numpy``: the floor, written by hand in numpy (CuPy on ``--device cuda``) with no graph.

Each row has the median seconds an epoch and the paired ratios: the median over repeats of
its time over the floor's (and PyTorch's) in the same repeat.

Usage:
    python benchmarks/mnist_mlp.py --preset cpu --markdown
    python benchmarks/mnist_mlp.py --hidden 512 --batch-size 128 --repeats 3 --only numpy,needle
    python benchmarks/mnist_mlp.py --preset cpu --only numpy,needle-course   # the default backward() only
    python benchmarks/mnist_mlp.py --device cuda --preset gpu --markdown

See docs/benchmarks.md for what the columns mean.
"""
import argparse
import os
import platform
import sys
import traceback

import numpy as np

BENCHMARK_DIR = os.path.dirname(os.path.abspath(__file__))
# The checkout's needle, so the benchmark measures the working tree without an install.
sys.path.insert(0, os.path.dirname(BENCHMARK_DIR))
sys.path.insert(0, BENCHMARK_DIR)

from floor_numpy import FloorMLP  # noqa: E402
from needle_mlp import NeedleCourseBackwardMLP, NeedleMLP, needle_available  # noqa: E402
from needle_compiled_mlp import NeedleCompiledMLP  # noqa: E402
from reference_torch import TorchMLP, torch_available  # noqa: E402
from timing import Stopwatch, median  # noqa: E402
from workload import Workload, load_mnist  # noqa: E402

IMPLEMENTATIONS = {"numpy": FloorMLP, "torch": TorchMLP, "needle": NeedleMLP, "needle-course": NeedleCourseBackwardMLP}
IMPLEMENTATIONS["needle-compiled"] = NeedleCompiledMLP  # ndl.compile of the course step (issue 19, point 3)
# The rows, in the order they run and print.
ROW_ORDER = ("needle-course", "needle", "needle-compiled", "torch", "numpy")
WARMUP_STEPS = 30
ACCURACY_TOLERANCE = 0.01
PRESETS = {
    # (hidden, batch size, epochs); None means "--epochs".
    "cpu": [(512, 128, None), (128, 32, None)],
    "gpu": [(512, 128, None), (128, 32, None), (4096, 1024, 3)],
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--only", default=",".join(ROW_ORDER), help=f"comma-separated subset of {','.join(ROW_ORDER)}"
    )
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="the standard configurations: cpu = H512/b128 and H128/b32; gpu adds H4096/b1024 x3 epochs",
    )
    parser.add_argument("--markdown", action="store_true", help="also print a markdown table for docs/benchmarks.md")
    parser.add_argument(
        "--flush-denormal",
        action="store_true",
        help="flush subnormal floats to zero in every implementation alike (ndl.set_flush_denormal(True) and "
        "torch.set_flush_denormal(True)); default: IEEE arithmetic, as each framework starts",
    )
    args = parser.parse_args(argv)
    args.only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(args.only) - set(IMPLEMENTATIONS))
    if unknown:
        parser.error(f"--only got {unknown}; choose from {sorted(IMPLEMENTATIONS)}, e.g. --only numpy,needle")
    if args.repeats < 1 or args.epochs < 1:
        parser.error("--repeats and --epochs must be at least 1")
    return args


def cpu_model():
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_description(device):
    lines = [f"CPU: {cpu_model()}, {os.cpu_count()} logical cores; Python {platform.python_version()}"]
    versions = [f"numpy {np.__version__}"]
    torch_ok, torch_version = torch_available()
    versions.append(f"torch {torch_version}" if torch_ok else "torch not installed")
    if device == "cuda":
        try:
            import cupy

            name = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
            versions.append(f"cupy {cupy.__version__} on {name}")
        except Exception as error:
            versions.append(f"cupy unavailable ({error})")
    lines.append(", ".join(versions))
    try:
        from needle.backend_ndarray import fused_updates

        lines.append(f"needle's SGD updates: {fused_updates.describe()}")
        from needle.backend_ndarray import fused_ops

        lines.append(f"needle's loss and ReLU-backward pieces: {fused_ops.describe()}")
        from needle import backward_walk

        lines.append(f"needle's backward(create_graph=False) walk: {backward_walk.describe()}")
    except ImportError:
        pass
    return lines


def selected_implementations(args):
    """The implementation classes to run, and a line for each one skipped."""
    chosen, skipped = [], []
    for key in ROW_ORDER:
        if key not in args.only:
            continue
        if key == "torch":
            ok, reason = torch_available()
            if not ok:
                skipped.append(f"torch skipped: {reason} (pip install 'needle-dl[bench]')")
                continue
        if key.startswith("needle"):
            ok, reason = needle_available()
            if not ok:
                skipped.append(f"{key} skipped: {reason}")
                continue
        chosen.append(IMPLEMENTATIONS[key])
    return chosen, skipped


def warmed_up_runners(workload, keys):
    """The implementations ``keys`` on ``workload``, each from the workload's initial weights
    (a copy each) and after ``WARMUP_STEPS`` training steps."""
    initial = workload.initial_weights()
    runners = []
    for key in keys:
        runner = IMPLEMENTATIONS[key](workload)
        runner.reset(tuple(w.copy() for w in initial))
        runner.train_steps(WARMUP_STEPS)
        runners.append(runner)
    return runners


def run_config(workload, classes, repeats):
    """{key: record} for one configuration, each record holding per-repeat timings, accuracy, memory."""
    initial = workload.initial_weights()

    def weights():
        # A fresh copy each time: an implementation may alias the arrays it is given and update
        # them in place (needle's Tensor keeps a numpy array without copying it).
        return tuple(w.copy() for w in initial)

    runners, records = [], {}
    for cls in classes:
        try:
            runner = cls(workload)
            runner.reset(weights())
            runner.train_steps(WARMUP_STEPS)
            runner.evaluate()
        except Exception:
            print(f"!! {cls.key} failed during set-up/warm-up; dropping it from this configuration:", file=sys.stderr)
            traceback.print_exc()
            continue
        runners.append(runner)
        records[runner.key] = {"name": runner.name, "train": [], "eval": [], "accuracy": [], "memory": []}
    for repeat in range(repeats):
        for runner in list(runners):
            record = records[runner.key]
            try:
                runner.reset(weights())
                train_watch, eval_watch = Stopwatch(runner.synchronize), Stopwatch(runner.synchronize)
                with runner.memory_meter() as memory:
                    with train_watch:
                        for _ in range(workload.epochs):
                            runner.train_epoch()
                    with eval_watch:
                        accuracy = runner.evaluate()
            except Exception:
                print(f"!! {runner.key} failed in repeat {repeat + 1}; dropping it:", file=sys.stderr)
                traceback.print_exc()
                runners.remove(runner)
                del records[runner.key]
                continue
            record["train"].append(train_watch.seconds / workload.epochs)
            record["eval"].append(eval_watch.seconds)
            record["accuracy"].append(accuracy)
            record["memory"].append(memory.peak_growth)
            print(
                f"   repeat {repeat + 1}/{repeats} {runner.name:26s} {record['train'][-1]:8.3f} s/epoch"
                f"  eval {eval_watch.seconds:6.3f} s  acc {accuracy:.4f}",
                flush=True,
            )
    return records


def summarise(records):
    """One row per implementation: medians, ratios against the floor and torch, accuracy, memory."""
    medians = {key: median(record["train"]) for key, record in records.items()}
    rows = []
    for key, record in records.items():
        rows.append(
            {
                "key": key,
                "name": record["name"],
                "train": medians[key],
                "best": min(record["train"]),
                "eval": median(record["eval"]),
                "accuracy": median(record["accuracy"]),
                "memory_mib": max(record["memory"]) / 2**20,
                "vs_floor": medians[key] / medians["numpy"] if "numpy" in medians else None,
                "vs_torch": medians[key] / medians["torch"] if "torch" in medians else None,
                "paired_vs_floor": paired_ratio(record, records.get("numpy")),
                "paired_vs_torch": paired_ratio(record, records.get("torch")),
            }
        )
    return rows


def paired_ratio(record, reference):
    """The median over repeats of this repeat's time over the reference's time in the same repeat.

    The two ran seconds apart, so a machine that changes speed part-way through a run (a shared
    one does) moves both; the ratio of the medians can then pair a fast repeat with a slow one.
    """
    if reference is None:
        return None
    ratios = [mine / theirs for mine, theirs in zip(record["train"], reference["train"])]
    return median(ratios) if ratios else None


def accuracy_warning(rows):
    """A loud message when the implementations' test accuracies differ by more than a point."""
    if len(rows) < 2:
        return None
    accuracies = {row["name"]: row["accuracy"] for row in rows}
    spread = max(accuracies.values()) - min(accuracies.values())
    if spread <= ACCURACY_TOLERANCE:
        return None
    listed = ", ".join(f"{name} {acc:.4f}" for name, acc in accuracies.items())
    return (
        "!" * 78 + f"\n!! WARNING: test accuracies differ by {100 * spread:.2f} points (> 1): {listed}.\n"
        "!! The implementations are not training the same model; the timings are not comparable.\n" + "!" * 78
    )


def _ratio(value):
    return "" if value is None else f"{value:.2f}x"


def print_text_table(title, rows):
    print(f"\n== {title}")
    print(
        f"   {'implementation':26s} {'s/epoch':>9s} {'best':>7s} {'eval s':>8s} {'test acc':>9s} {'peak MiB':>9s}"
        f" {'vs floor':>9s} {'vs torch':>9s} {'paired vs floor':>16s} {'paired vs torch':>16s}"
    )
    for row in rows:
        print(
            f"   {row['name']:26s} {row['train']:9.3f} {row['best']:7.3f} {row['eval']:8.3f} {100 * row['accuracy']:8.2f}%"
            f" {row['memory_mib']:9.1f} {_ratio(row['vs_floor']):>9s} {_ratio(row['vs_torch']):>9s}"
            f" {_ratio(row['paired_vs_floor']):>16s} {_ratio(row['paired_vs_torch']):>16s}"
        )


def markdown_table(results, memory_label):
    lines = [
        f"| config | implementation | s/epoch (median) | s/epoch (best) | eval s (median) | test acc | {memory_label}"
        " | vs floor | vs torch | paired vs floor | paired vs torch |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for title, rows in results:
        for row in rows:
            lines.append(
                f"| {title} | {row['name']} | {row['train']:.3f} | {row['best']:.3f} | {row['eval']:.3f} | {100 * row['accuracy']:.2f}% |"
                f" {row['memory_mib']:.1f} | {_ratio(row['vs_floor'])} | {_ratio(row['vs_torch'])} |"
                f" {_ratio(row['paired_vs_floor'])} | {_ratio(row['paired_vs_torch'])} |"
            )
    return "\n".join(lines)


def set_arithmetic(flush_denormal):
    """Put this thread's CPU arithmetic in the mode asked for; say which, for the header.

    The implementations run in this one thread, so the mode is the same for all of them. It is
    set in any case, so that a needle imported by an earlier run in the process cannot leave it on.
    """
    try:
        from needle import set_flush_denormal
    except ImportError:  # a needle without it (or none): every row computes in IEEE arithmetic
        set_flush_denormal = None
    if set_flush_denormal is None or not set_flush_denormal(flush_denormal):
        if flush_denormal:
            sys.exit("--flush-denormal: needle cannot set this CPU's denormal mode (its C extension is not built: "
                     "pip install -e . with a C compiler, or run without --flush-denormal)")
        return "IEEE (subnormal floats kept; the mode cannot be set here)"
    torch_ok, _ = torch_available()
    if torch_ok:
        import torch

        torch.set_flush_denormal(flush_denormal)  # the same register; also PyTorch's own threads
    if flush_denormal:
        return "subnormal floats flushed to zero in every implementation (--flush-denormal)"
    return "IEEE (subnormal floats kept, each framework's default; --flush-denormal flushes them)"


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cuda":
        try:
            import cupy

            cupy.cuda.Device(0).compute_capability
        except Exception as error:
            sys.exit(f"--device cuda needs CuPy and an NVIDIA GPU ({error}); run with --device cpu instead.")
    np.random.seed(args.seed)
    classes, skipped = selected_implementations(args)
    arithmetic = set_arithmetic(args.flush_denormal)
    (train_images, train_labels), (test_images, test_labels), loader_name = load_mnist()
    for line in machine_description(args.device):
        print(line)
    print(f"MNIST loaded with {loader_name}: train {train_images.shape}, test {test_images.shape}")
    print(f"device {args.device}, {args.repeats} repeats, lr {args.lr}, momentum 0.9, warm-up {WARMUP_STEPS} steps")
    print(f"CPU arithmetic: {arithmetic}")
    for line in skipped:
        print(line)
    if not classes:
        sys.exit("nothing to run: every implementation chosen with --only is unavailable")

    if args.preset:
        configs = [(h, b, e if e is not None else args.epochs) for h, b, e in PRESETS[args.preset]]
    else:
        configs = [(args.hidden, args.batch_size, args.epochs)]
    results, warnings = [], []
    for hidden, batch_size, epochs in configs:
        title = f"H={hidden}, batch {batch_size}" + (f", {epochs} epochs" if epochs > 1 else "")
        print(f"\n-- {title}", flush=True)
        workload = Workload(
            train_images, train_labels, test_images, test_labels,
            hidden=hidden, batch_size=batch_size, epochs=epochs, lr=args.lr, device=args.device, seed=args.seed,
        )
        rows = summarise(run_config(workload, classes, args.repeats))
        results.append((title, rows))
        print_text_table(title, rows)
        warning = accuracy_warning(rows)
        if warning:
            print(warning, flush=True)
            warnings.append(warning)
    if args.markdown:
        memory_label = "peak host MiB" if args.device == "cpu" else "peak GPU MiB"
        print("\n" + markdown_table(results, memory_label))
    for warning in warnings:
        print(warning, file=sys.stderr)
    return 1 if warnings else 0


if __name__ == "__main__":
    sys.exit(main())
