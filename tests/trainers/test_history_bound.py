"""The monitor's own memory is bounded: a recent window, a thinned long run, and a file for every step."""
import csv
import json

import pytest

import needle as ndl
from trainers import MemoryMonitor, StepRecord
from trainers.monitor.history import StepHistory


def steps(monitor, count):
    w = ndl.Tensor([1.0, 2.0])
    for _ in range(count):
        (w * w).sum().backward(create_graph=False)
        monitor.step()


def test_in_memory_history_stays_at_its_bound_after_many_steps():
    monitor = MemoryMonitor(warn="ignore", recent=64, long_run_points=32)
    steps(monitor, 5000)
    held_after_5000 = len(monitor.history.records())
    steps(monitor, 15000)
    history = monitor.history
    assert len(history) == 20000
    assert len(history.recent) == 64 and 16 <= len(history.long_run) < 32
    assert held_after_5000 <= 64 + 32 and len(history.records()) <= 64 + 32
    # the long run still spans the whole run, evenly
    iterations = history.long_run.iterations().tolist()
    assert iterations[0] == 0 and iterations[-1] >= 20000 - 2 * history.long_run.stride
    assert len({b - a for a, b in zip(iterations, iterations[1:])}) == 1
    assert history[-1].iteration == 19999 and history[19936].iteration == 19936
    with pytest.raises(IndexError, match="older than the recent window"):
        history[100]


def test_peaks_and_first_record_survive_the_window():
    history = StepHistory(recent=3, long_run_points=4)
    for i, nodes in enumerate([5, 90, 7, 6, 5, 4]):
        history.append(StepRecord(i, 0, nodes, 0, 0, 0, 1, {"cpu": nodes * 10}, 100 + nodes, 0, 0, 0.0))
    assert history.first.iteration == 0 and history.peak_live_nodes == 90 and history.peak_live_bytes == 900
    assert history.peak_host_rss == 190
    monitor = MemoryMonitor(warn="ignore", recent=3)
    monitor.history = history
    assert "peak 90" in monitor.summary() and "first 5" in monitor.summary()


@pytest.mark.parametrize("recent, points", [(0, 8), (8, 1), (True, 8), (2.5, 8)])
def test_bad_bounds_are_rejected(recent, points):
    with pytest.raises(ValueError, match="recent|long_run_points"):
        MemoryMonitor(recent=recent, long_run_points=points)


def test_every_step_streams_to_a_jsonl_file(tmp_path):
    path = tmp_path / "steps.jsonl"
    with MemoryMonitor(warn="ignore", recent=10, log_path=path) as monitor:
        steps(monitor, 300)
    with open(path) as handle:
        rows = [json.loads(line) for line in handle]
    assert [row["iteration"] for row in rows] == list(range(300))
    assert rows[-1] == monitor.history[-1].as_dict()
    assert len(monitor.history.recent) == 10


def test_every_step_streams_to_a_csv_file_and_a_later_run_appends(tmp_path):
    path = tmp_path / "steps.csv"
    monitor = MemoryMonitor(warn="ignore", recent=10, log_path=path)
    steps(monitor, 50)
    monitor.close()
    steps(monitor, 5)
    monitor.close()
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [int(row["iteration"]) for row in rows] == list(range(55))
    assert int(rows[-1]["bytes_cpu"]) == monitor.history[-1].bytes_by_device["cpu"]


def test_log_path_needs_a_known_format(tmp_path):
    with pytest.raises(ValueError, match=r"log_path must end in \.csv or \.jsonl"):
        MemoryMonitor(log_path=tmp_path / "steps.txt")


def test_plot_and_exports_use_the_records_held(tmp_path):
    monitor = MemoryMonitor(warn="ignore", recent=20, long_run_points=8)
    steps(monitor, 200)
    monitor.to_jsonl(tmp_path / "held.jsonl")
    with open(tmp_path / "held.jsonl") as handle:
        held = [json.loads(line)["iteration"] for line in handle]
    assert held == [r.iteration for r in monitor.history.records()]
    assert held == sorted(held) and held[-20:] == list(range(180, 200)) and held[0] == 0
    pytest.importorskip("matplotlib")
    monitor.plot(tmp_path / "memory.png")
    assert (tmp_path / "memory.png").stat().st_size > 0
