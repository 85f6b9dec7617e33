"""monitor.plot() and trainer.plot(): Figures that display inline, written to a path on request."""
import os
import sys

import numpy as np
import pytest

import needle as ndl
from needle.data import DataLoader, NDArrayDataset
from trainers import MemoryMonitor, Trainer

matplotlib = pytest.importorskip("matplotlib")
from matplotlib.figure import Figure  # noqa: E402


def healthy_monitor(steps=20):
    w = ndl.Tensor(np.ones(4, dtype=np.float32))
    monitor = MemoryMonitor()
    for _ in range(steps):
        (w * w).sum().backward(create_graph=False)
        w.grad = None
        monitor.step()
    return monitor


def trained(epochs=3):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((96, 3)).astype(np.float32)
    loader = DataLoader(NDArrayDataset(X, (X[:, 0] > 0).astype(np.uint8)), batch_size=16)
    np.random.seed(0)
    model = ndl.nn.Sequential(ndl.nn.Linear(3, 16), ndl.nn.ReLU(), ndl.nn.Linear(16, 2))
    trainer = Trainer(model, ndl.optim.SGD(model.parameters(), lr=0.5), progress=False)
    trainer.fit(loader, epochs=epochs, val_loader=loader)
    return trainer


def test_monitor_plot_without_a_path_returns_a_figure_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    figure = healthy_monitor().plot()
    assert isinstance(figure, Figure)
    assert figure._repr_png_()[:8] == b"\x89PNG\r\n\x1a\n"  # what a notebook shows inline
    assert os.listdir(tmp_path) == []


def test_plot_with_a_path_writes_the_png_and_returns_the_figure(tmp_path):
    figure = healthy_monitor().plot(tmp_path / "memory.png")
    assert isinstance(figure, Figure)
    assert (tmp_path / "memory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert isinstance(trained().plot(tmp_path / "training.png"), Figure)
    assert sorted(os.listdir(tmp_path)) == ["memory.png", "training.png"]


def test_plots_leave_pyplot_and_the_backend_alone():
    backend = matplotlib.get_backend()
    had_pyplot = "matplotlib.pyplot" in sys.modules
    healthy_monitor().plot()
    trained().plot()
    assert matplotlib.get_backend() == backend
    if had_pyplot:
        import matplotlib.pyplot as plt

        assert plt.get_fignums() == []  # no figure left in pyplot's registry to show twice
    else:
        assert "matplotlib.pyplot" not in sys.modules


def test_a_flat_zero_node_line_sits_above_the_x_axis():
    figure = healthy_monitor().plot()
    nodes_axis = figure.axes[0]
    live = nodes_axis.get_lines()[0].get_ydata()
    assert max(live) == 0  # a healthy loop keeps no graph between steps
    bottom, top = nodes_axis.get_ylim()
    assert bottom < 0 < top and -bottom >= 0.05 * (top - bottom)


def test_accuracy_is_drawn_in_percent_from_just_below_the_lowest_value_to_100():
    trainer = trained()
    figure = trainer.plot()
    accuracy_axis = figure.axes[1]
    values = np.concatenate([line.get_ydata() for line in accuracy_axis.get_lines()])
    accuracies = [entry["accuracy"] for entry in trainer.history.steps]
    assert max(values) == pytest.approx(100 * max(accuracies))
    bottom, top = accuracy_axis.get_ylim()
    assert 100 <= top <= 101
    assert max(0, min(values) - 10) <= bottom < min(values)
    label = accuracy_axis.yaxis.get_major_formatter()(90, 0)
    assert label.endswith("%")


def test_the_training_figure_puts_each_monitored_step_at_its_own_training_step():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((64, 3)).astype(np.float32)
    loader = DataLoader(NDArrayDataset(X, (X[:, 0] > 0).astype(np.uint8)), batch_size=4)
    model = ndl.nn.Linear(3, 2)
    monitor = MemoryMonitor(recent=4, long_run_points=4)  # 16 steps: the long-run samples are sparse
    trainer = Trainer(model, ndl.optim.SGD(model.parameters(), lr=0.1), monitor=monitor, progress=False)
    trainer.fit(loader, epochs=1)
    assert len(monitor.history.long_run) > 0  # samples older than the window exist, every stride-th step
    figure = trainer.plot()
    lines = {line.get_label(): line for axis in figure.axes for line in axis.get_lines()}
    # the monitor's panels draw its consecutive recent steps, at the training steps they were taken
    assert list(lines["host RSS (MB, right)"].get_xdata()) == [13, 14, 15, 16]
    assert list(lines["host RSS (MB, right)"].get_ydata()) == [r.host_rss / 1e6 for r in monitor.history.recent]
    assert list(lines["spent (after backward)"].get_xdata()) == [13, 14, 15, 16]
