"""The benchmark's summary arithmetic: ratios of medians, paired ratios, the accuracy check."""
import os
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
sys.path.insert(0, os.path.abspath(BENCHMARKS))

mnist_mlp = pytest.importorskip("mnist_mlp")


def record(name, train, accuracy=0.95):
    return {"name": name, "train": train, "eval": [0.01] * len(train), "accuracy": [accuracy] * len(train), "memory": [0]}


def test_paired_ratio_survives_a_machine_that_changes_speed_mid_run():
    # The machine runs at full speed for two repeats, then at half speed; needle is 1.1x the floor throughout.
    floor = [1.0, 1.0, 2.0, 2.0, 2.0]
    needle = [1.1 * t for t in [1.0, 1.0, 1.0, 2.0, 2.0]]  # needle's third repeat ran before the slowdown
    rows = {row["key"]: row for row in mnist_mlp.summarise({"numpy": record("floor", floor), "needle": record("needle", needle)})}
    assert rows["needle"]["paired_vs_floor"] == pytest.approx(1.1)
    assert rows["needle"]["vs_floor"] == pytest.approx(0.55)  # median 1.1 against median 2.0: misleading
    assert rows["needle"]["best"] == pytest.approx(1.1)
    assert rows["needle"]["vs_torch"] is None and rows["needle"]["paired_vs_torch"] is None


def test_paired_ratio_is_a_median_of_per_repeat_ratios():
    ratio = mnist_mlp.paired_ratio(record("a", [3.0, 1.0, 10.0]), record("b", [1.0, 1.0, 4.0]))
    assert ratio == pytest.approx(2.5)  # ratios 3, 1, 2.5


def test_accuracies_more_than_a_point_apart_are_flagged():
    close = mnist_mlp.summarise({"numpy": record("floor", [1.0], 0.950), "needle": record("needle", [1.0], 0.945)})
    assert mnist_mlp.accuracy_warning(close) is None
    apart = mnist_mlp.summarise({"numpy": record("floor", [1.0], 0.950), "needle": record("needle", [1.0], 0.930)})
    assert "differ by 2.00 points" in mnist_mlp.accuracy_warning(apart)
