"""Python bytecodes per training step of the benchmark MLP, by function: where the framework's own work is.

Counts are deterministic where timings on a shared machine are not: this traces ``--steps``
steps with ``sys.settrace`` opcode events and prints, per step, the bytecodes and calls of each
Python function (numpy's own Python functions included; C functions and the operators' C code are
not counted, see ``instructions_per_step.py`` for machine instructions). Tracing makes the steps
far slower; the counts do not depend on it. They locate the Python work of a step; they do not
price it: bytecodes differ in cost by far, and cutting a quarter of a step's (the per-Value
bookkeeping, moved to C) did not change its time (docs/benchmarks.md), so time any cut.

The data is random and MNIST-shaped (no download); the model and flags are those of
``instructions_per_step.py``: the fast path by default, ``--course``, ``--compiled``, ``--floor``.

Usage:
    python benchmarks/bytecodes_per_step.py --steps 50
    python benchmarks/bytecodes_per_step.py --course --top 40
"""
import argparse
import collections
import os
import sys

from instructions_per_step import REPO_ROOT, build_model


def count_bytecodes(model, steps):
    """``(bytecodes, calls)``: Counters keyed by ``(file, first line, function)`` over ``steps`` steps."""
    bytecodes, calls = collections.Counter(), collections.Counter()

    def trace(frame, event, arg):
        code = frame.f_code
        key = (os.path.relpath(code.co_filename, REPO_ROOT), code.co_firstlineno, code.co_name)
        if event == "call":
            calls[key] += 1
            frame.f_trace_opcodes = True
            frame.f_trace_lines = False
        elif event == "opcode":
            bytecodes[key] += 1
        return trace

    sys.settrace(trace)
    try:
        model.train_steps(steps)
    finally:
        sys.settrace(None)
    return bytecodes, calls


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--top", type=int, default=25, help="how many functions to list")
    parser.add_argument("--floor", action="store_true", help="count the hand-written numpy floor instead of needle")
    parser.add_argument("--course", action="store_true", help="count the course's loss.backward() step")
    parser.add_argument("--compiled", action="store_true", help="count the ndl.compile replay of the course step")
    args = parser.parse_args(argv)
    bytecodes, calls = count_bytecodes(build_model(args), args.steps)
    who = "floor" if args.floor else "needle backward()" if args.course else "needle compiled" if args.compiled else "needle"
    steps = args.steps
    print(f"{who} H={args.hidden} batch {args.batch_size}: {sum(bytecodes.values()) / steps:.0f} bytecodes "
          f"and {sum(calls.values()) / steps:.0f} Python calls a step")
    for key, count in bytecodes.most_common(args.top):
        path, line, name = key
        print(f"  {count / steps:7.0f} bytecodes {calls[key] / steps:6.1f} calls  {path}:{line} {name}")


if __name__ == "__main__":
    main()
