"""MemoryMonitor's records against needle's own counters, its exports, reports and options."""
import csv
import gc
import json

import numpy as np
import pytest

import needle as ndl
from trainers import MemoryMonitor, StepRecord


def make_weights():
    return ndl.Tensor(np.arange(12, dtype="float32").reshape(4, 3))


def one_iteration(w, x):
    loss = (x @ w).sum()
    loss.backward(create_graph=False)
    return loss


def test_records_match_the_core_counters():
    w = make_weights()
    x = ndl.Tensor(np.ones((2, 4), dtype="float32"), requires_grad=False)
    gc.collect()
    monitor = MemoryMonitor(warn="ignore")
    before = ndl.autograd.snapshot()
    loss = one_iteration(w, x)
    record = monitor.step()
    after = ndl.autograd.snapshot()
    assert record.iteration == 0
    assert record.live_nodes == after.live_nodes
    assert record.live_tensors == after.live_tensors
    assert record.live_spent_nodes == after.live_spent_nodes == before.live_spent_nodes + 2
    assert record.nodes_created == after.nodes_created - before.nodes_created == 2
    assert record.nodes_freed == after.nodes_freed - before.nodes_freed
    assert record.backward_calls == 1
    assert record.bytes_by_device == after.bytes_by_device
    assert record.live_bytes == after.live_bytes
    assert record.host_rss > 0 and record.device_memory_in_use == 0
    del loss
    second = monitor.step()
    assert second.nodes_freed == 2 and second.nodes_created == 0 and second.backward_calls == 0
    assert second.live_nodes == record.live_nodes - 2


def test_bytes_follow_a_retained_graph():
    w = make_weights()
    x = ndl.Tensor(np.ones((2, 4), dtype="float32"), requires_grad=False)
    monitor = MemoryMonitor(warn="ignore")
    kept = []
    for _ in range(5):
        kept.append(one_iteration(w, x))
        monitor.step()
    growth = [later.live_bytes - earlier.live_bytes for earlier, later in zip(monitor.history, monitor.history[1:])]
    node_growth = [later.live_nodes - earlier.live_nodes for earlier, later in zip(monitor.history, monitor.history[1:])]
    assert node_growth == [2, 2, 2, 2]
    assert all(step > 0 for step in growth)


def run_monitor(iterations=4):
    w = make_weights()
    x = ndl.Tensor(np.ones((2, 4), dtype="float32"), requires_grad=False)
    monitor = MemoryMonitor()
    for _ in range(iterations):
        one_iteration(w, x)
        monitor.step()
    return monitor


def test_csv_round_trip(tmp_path):
    monitor = run_monitor()
    path = tmp_path / "memory.csv"
    monitor.to_csv(path)
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(monitor.history)
    for row, record in zip(rows, monitor.history):
        assert int(row["iteration"]) == record.iteration
        assert int(row["live_nodes"]) == record.live_nodes
        assert int(row["nodes_created"]) == record.nodes_created
        assert int(row["bytes_cpu"]) == record.bytes_by_device["cpu"]
        assert float(row["wall_time"]) == pytest.approx(record.wall_time)


def test_jsonl_round_trip(tmp_path):
    monitor = run_monitor()
    path = tmp_path / "memory.jsonl"
    monitor.to_jsonl(path)
    with open(path) as handle:
        rebuilt = [StepRecord(**json.loads(line)) for line in handle]
    assert [r.as_dict() for r in rebuilt] == [r.as_dict() for r in monitor.history]


def test_summary_reports_iterations_peaks_and_warnings():
    assert MemoryMonitor().summary() == "MemoryMonitor: no iterations monitored"
    monitor = run_monitor(iterations=3)
    text = monitor.summary()
    last = monitor.history[-1]
    assert text.startswith("MemoryMonitor: 3 iterations")
    assert f"last {last.live_nodes}, peak {max(r.live_nodes for r in monitor.history)}" in text
    assert "leak warnings: 0" in text


def test_plot_without_matplotlib_names_the_install(tmp_path):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("matplotlib is installed: the missing-dependency message cannot be seen")
    with pytest.raises(ImportError, match=r"needs matplotlib: pip install 'needle-dl\[plot\]'") as raised:
        run_monitor().plot(tmp_path / "memory.png")
    assert "monitor.to_csv" in str(raised.value)


def test_watch_steps_once_per_item():
    monitor = MemoryMonitor()
    seen = []
    for item in monitor.watch(range(5)):
        seen.append(item)
        assert len(monitor.history) == item  # the step for an item comes after its body
    assert seen == [0, 1, 2, 3, 4]
    assert [r.iteration for r in monitor.history] == [0, 1, 2, 3, 4]
    assert monitor.latest is monitor.history[-1]


def test_context_manager_stops_a_search_in_progress():
    w = make_weights()
    x = ndl.Tensor(np.ones((2, 4), dtype="float32"), requires_grad=False)
    kept = []
    with MemoryMonitor(warn="ignore") as monitor:
        monitor.warn = "always"  # diagnose, but stop before anything is reported
        for _ in range(4):
            kept.append(one_iteration(w, x))
            monitor.step()
        assert monitor.diagnosis.state == "locating_growth" and monitor.diagnosis.locator.active
    assert monitor.diagnosis.state == "watching" and not monitor.diagnosis.locator.active
    assert not ndl.autograd._NODE_OBSERVERS


@pytest.mark.parametrize("mode", ["never", "", None, "ONCE"])
def test_unknown_warn_mode_is_rejected(mode):
    with pytest.raises(ValueError, match="warn must be one of"):
        MemoryMonitor(warn=mode)


def test_monitor_without_iterations_has_no_latest():
    assert MemoryMonitor().latest is None
