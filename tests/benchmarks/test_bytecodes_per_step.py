"""benchmarks/bytecodes_per_step.py: deterministic per-function bytecode counts of a training step."""
import argparse
import os
import sys

BENCHMARKS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
sys.path.insert(0, BENCHMARKS)

import bytecodes_per_step  # noqa: E402
from needle.compiler.compiled import NUMPY_MAJOR  # noqa: E402
from instructions_per_step import build_model  # noqa: E402


def arguments(**paths):
    flags = {"floor": False, "course": False, "compiled": False}
    flags.update(paths)
    return argparse.Namespace(hidden=16, batch_size=8, **flags)


def counted(**paths):
    bytecodes, calls = bytecodes_per_step.count_bytecodes(build_model(arguments(**paths)), 2)
    return sum(bytecodes.values()), bytecodes, calls


def test_counts_are_the_same_for_the_same_steps_and_name_needles_functions():
    first, bytecodes, calls = counted()
    again, _, _ = counted()
    assert first == again, "bytecode counts must not depend on the run"
    fills = [key for key in bytecodes if key[0].endswith(os.path.join("needle", "autograd.py")) and key[2] == "_fill"]
    assert fills and calls[fills[0]] > 0, "the fast path makes Values through autograd._fill"


def test_the_floor_runs_fewer_bytecodes_than_each_needle_step():
    floor, _, _ = counted(floor=True)
    fast, _, _ = counted()
    course, _, _ = counted(course=True)
    assert floor < fast < course, (floor, fast, course)
    if NUMPY_MAJOR >= 2:  # ndl.compile needs numpy 2
        compiled, _, _ = counted(compiled=True)
        assert floor < compiled < fast, (floor, compiled, fast)
