"""benchmarks/denormals.py: both modes timed on the same epochs, ratios paired, the mode put back."""
import os
import sys

import numpy as np
import pytest

BENCHMARKS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
sys.path.insert(0, BENCHMARKS)

import denormals as denormals_benchmark  # noqa: E402
import needle as ndl  # noqa: E402
from needle import denormals  # noqa: E402
from workload import Workload  # noqa: E402

settable = pytest.mark.skipif(
    denormals._denormals is None or not denormals._denormals.supported(), reason="the denormal mode cannot be set here"
)


def test_subnormal_count_counts_only_subnormals():
    values = np.array([0.0, 1e-39, -1e-40, 1.2e-38, 1.0, np.finfo(np.float32).tiny], dtype=np.float32)
    assert denormals_benchmark.subnormal_count(values) == 2


def test_rows_pair_each_repeat_with_its_own_floor():
    times = {
        "needle": {False: [2.0, 4.0, 2.0], True: [1.0, 2.0, 1.5]},
        "numpy": {False: [1.0, 2.0, 1.0], True: [1.0, 1.0, 1.0]},
    }
    rows = {row["name"]: row for row in denormals_benchmark.rows_of(times, {"needle": "n", "numpy": "floor"})}
    assert rows["n"]["gain"] == pytest.approx(0.5)
    assert rows["n"]["ieee_vs_floor"] == pytest.approx(2.0)
    assert rows["n"]["flushed_vs_floor"] == pytest.approx(1.5)
    assert rows["floor"]["flushed_vs_floor"] == pytest.approx(1.0)


@settable
def test_a_run_times_both_modes_and_leaves_ieee_arithmetic():
    rng = np.random.default_rng(0)
    images = rng.random((2048, 784), dtype=np.float32)  # the warm-up takes 30 batches
    labels = rng.integers(0, 10, 2048).astype(np.uint8)
    workload = Workload(images, labels, images[:64], labels[:64], hidden=8, batch_size=64, epochs=1, lr=0.1, device="cpu")
    ndl.set_flush_denormal(True)
    try:
        times, names, subnormals = denormals_benchmark.run_config(workload, ["needle", "numpy"], repeats=2, seed=0)
        assert not ndl.is_flush_denormal_enabled()
    finally:
        ndl.set_flush_denormal(False)
    assert set(times) == {"needle", "numpy"} and names["numpy"].startswith("floor")
    assert all(len(record[mode]) == 2 for record in times.values() for mode in (False, True))
    assert len(subnormals) == 2 and subnormals[0][1] == 784 * 8 + 8 + 8 * 10 + 10
