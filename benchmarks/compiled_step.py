"""Per-step time of an ``ndl.compile`` replay against the hand-written floor (and PyTorch), paired.

Every path trains the benchmark's 784 -> H -> 10 MLP (SGD, momentum 0.9) on the same MNIST
batches, gathered from the whole arrays by index every step (no DataLoader, so the figure is
the step itself; on a GPU the data sits on the device and each batch is gathered there).
Blocks of steps alternate, one block per path in turn, and each ratio is taken block by block
against the block of the reference path run just before: the median of those ratios is the
figure to quote on a shared machine. On CUDA a block ends with a device synchronize, so a
block's time is the GPU's as well as the host's.

Paths (``--paths``): ``floor`` (numpy, or CuPy with fused kernels, by hand), ``compiled``
(``ndl.compile`` of the course step; on CUDA its replay is CUDA graph launches), ``needle`` (the
eager course step with ``backward(create_graph=False)``), ``course`` (the eager course step with
``loss.backward()``) and ``torch`` (eager PyTorch, when it imports).

Usage:
    OPENBLAS_NUM_THREADS=1 python benchmarks/compiled_step.py --hidden 128 --batch-size 32
    python benchmarks/compiled_step.py --device cuda --paths torch,compiled,needle,floor --reference torch
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
from needle_mlp import NeedleCourseBackwardMLP, NeedleMLP  # noqa: E402
from reference_torch import TorchMLP, torch_available  # noqa: E402
from timing import median  # noqa: E402
from workload import Workload, load_mnist  # noqa: E402

PATHS = {
    "floor": FloorMLP, "compiled": NeedleCompiledMLP, "needle": NeedleMLP, "course": NeedleCourseBackwardMLP,
    "torch": TorchMLP,
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--steps", type=int, default=100, help="steps per block")
    parser.add_argument("--paths", default="floor,compiled", help=f"comma-separated, from {','.join(PATHS)}")
    parser.add_argument("--reference", default="floor", help="the path every ratio divides by")
    args = parser.parse_args(argv)
    args.paths = [path for path in args.paths.split(",") if path]
    unknown = [path for path in args.paths if path not in PATHS]
    if unknown:
        parser.error(f"unknown path(s) {', '.join(unknown)}; choose from {', '.join(PATHS)}")
    if "torch" in args.paths and not torch_available()[0]:
        print(f"torch left out: {torch_available()[1]}")
        args.paths.remove("torch")
    if args.reference not in args.paths:
        parser.error(f"--reference {args.reference} is not among --paths {','.join(args.paths)}")
    return args


def step_blocks(implementation, key, batch_rows, device):
    """A function that runs one block of steps on ``batch_rows`` (index arrays) and waits for the device."""
    if key in ("floor", "torch"):
        if key == "torch":
            import torch

            batches = [torch.from_numpy(rows).to(implementation.device) for rows in batch_rows]
        else:
            batches = [implementation.xp.asarray(rows) for rows in batch_rows]

        def block():
            for rows in batches:
                implementation._step(rows)
            implementation.synchronize()

        return block
    ndl, workload = implementation.ndl, implementation.workload
    from needle.backend_ndarray import NDArray

    where = ndl.cuda() if device == "cuda" else ndl.cpu()
    images = where.xp.asarray(workload.train_images)
    labels = where.xp.asarray(workload.train_labels)
    indices = [where.xp.asarray(rows) for rows in batch_rows]
    leaf = ndl.Tensor.make_const

    def block():
        # NOTE: gathered per step, as the DataLoader does and as the floor and torch do
        for rows in indices:
            implementation._step(leaf(NDArray.wrap(images[rows], where)), leaf(NDArray.wrap(labels[rows], where)))
        implementation.synchronize()

    return block


def describe_plans(compiled):
    """What the compiled step replays: per plan, CUDA graph launches and host calls, or an eager fallback."""
    lines = [f"compiled: {compiled.captures} capture(s), {compiled.replays} replays so far"]
    for entry in compiled._plans.values():
        segments = getattr(entry, "segments", None)
        if segments is not None:
            host_calls = len(segments.items) - segments.graphs
            lines.append(f"  CUDA plan: {segments.graphs} graph launch(es) and {host_calls} host call(s) a replay")
        elif hasattr(entry, "reason"):
            lines.append(f"  runs eagerly: {entry.reason}")
        else:
            lines.append(f"  CPU plan: {len(entry.plan.runs)} calls a replay ({entry.plan.steps_recorded} recorded)")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    (train_images, train_labels), (test_images, test_labels), _ = load_mnist()
    workload = Workload(
        train_images, train_labels, test_images, test_labels,
        hidden=args.hidden, batch_size=args.batch_size, epochs=1, lr=0.1, device=args.device,
    )
    order = np.random.RandomState(0).permutation(train_images.shape[0])
    starts = range(0, args.batch_size * args.steps, args.batch_size)
    batch_rows = [order[s : s + args.batch_size] for s in starts]
    blocks = {}
    for key in args.paths:
        implementation = PATHS[key](workload)
        implementation.reset(workload.initial_weights())
        blocks[key] = step_blocks(implementation, key, batch_rows, args.device)
        blocks[key]()  # warm-up (CuPy compiles its kernels; the compiled step captures here)
        blocks[key]()
        if key == "compiled":
            print(describe_plans(implementation._compiled_step))
    times = {key: [] for key in args.paths}
    for _ in range(args.blocks):
        for key in args.paths:
            start = time.perf_counter()
            blocks[key]()
            times[key].append((time.perf_counter() - start) / args.steps)
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "unset")
    print(f"{args.device}, H={args.hidden}, batch {args.batch_size}: {args.blocks} blocks of {args.steps} steps "
          f"per path, in turn; BLAS threads {threads}")
    reference = times[args.reference]
    for key in args.paths:
        ratios = [mine / theirs for mine, theirs in zip(times[key], reference)]
        print(f"  {key:9s} median {median(times[key]) * 1e6:8.1f} us/step   "
              f"paired ratio {key}/{args.reference}: median {median(ratios):.3f}x "
              f"(min {min(ratios):.3f}x, max {max(ratios):.3f}x)")


if __name__ == "__main__":
    main()
