"""benchmarks/paired_blocks.py: short alternating blocks of each path against the floor."""
import os
import sys

import numpy as np
import pytest

BENCHMARKS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
sys.path.insert(0, BENCHMARKS)

import paired_blocks  # noqa: E402
from workload import Workload  # noqa: E402


def test_every_path_runs_its_blocks_and_is_divided_by_the_floor_of_its_round():
    rng = np.random.default_rng(0)
    images = rng.random((2048, 784), dtype=np.float32)  # the warm-up takes 30 batches
    labels = rng.integers(0, 10, 2048).astype(np.uint8)
    workload = Workload(images, labels, images[:64], labels[:64], hidden=8, batch_size=32, epochs=1, lr=0.1, device="cpu")
    seconds = paired_blocks.measure(workload, ["numpy", "needle-course", "needle"], steps=3, blocks=4)
    assert list(seconds) == ["numpy", "needle-course", "needle"]
    assert all(len(times) == 4 and min(times) > 0 for _, times in seconds.values())
    summary = paired_blocks.ratios_to_floor(seconds)
    assert summary["numpy"][2:] == (1.0, 1.0, 1.0)
    floor = np.array(seconds["numpy"][1])
    course = np.array(seconds["needle-course"][1])
    assert summary["needle-course"][2] == pytest.approx(float(np.median(course / floor)))


def test_the_floor_must_come_first():
    with pytest.raises(SystemExit):
        paired_blocks.parse_args(["--only", "needle,numpy"])
