"""Loggers write every step and epoch as training goes; History exports; every file is atomic."""
import csv
import json
import os
import sys

import numpy as np
import pytest

import needle as ndl
from needle.data import DataLoader, NDArrayDataset
from trainers import Callback, CSVLogger, History, JSONLinesLogger, MemoryMonitor, Trainer
from trainers.monitor import plot as plot_module
from trainers import io as io_module
from trainers.io import atomic_write
from trainers.callbacks.loggers import EPOCH_COLUMNS, STEP_COLUMNS


def data(count=48, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((count, 3)).astype(np.float32)
    return NDArrayDataset(X, (X[:, 0] > 0).astype(np.uint8))


def make_trainer(*callbacks, monitor=False):
    np.random.seed(0)
    model = ndl.nn.Sequential(ndl.nn.Linear(3, 8), ndl.nn.ReLU(), ndl.nn.Linear(8, 2))
    optimizer = ndl.optim.SGD(model.parameters(), lr=0.2)
    return Trainer(model, optimizer, monitor=monitor, progress=False, callbacks=list(callbacks))


def read_csv(path):
    with open(path, newline="") as stream:
        return list(csv.DictReader(stream))


def read_jsonl(path):
    with open(path) as stream:
        return [json.loads(line) for line in stream]


def cell(value):
    return "" if value is None else str(value)


def test_csv_logger_rows_match_the_history(tmp_path):
    logger = CSVLogger(tmp_path / "logs")
    trainer = make_trainer(logger, monitor=MemoryMonitor())
    history = trainer.fit(DataLoader(data(), batch_size=16, shuffle=True), epochs=2,
                          val_loader=DataLoader(data(16, seed=1), batch_size=8))
    steps, epochs = read_csv(logger.step_path), read_csv(logger.epoch_path)
    with open(logger.step_path) as stream:
        assert stream.readline().strip() == ",".join(STEP_COLUMNS)
    assert [row["step"] for row in steps] == [str(n) for n in range(1, 7)]
    for row, entry in zip(steps, history.steps):
        for key in ("step", "epoch", "loss", "accuracy", "batch_size", "live_nodes", "memory_bytes"):
            assert row[key] == cell(entry[key]), key
        assert float(row["lr"]) == 0.2
        assert int(row["host_rss"]) > 0
    assert [float(row["time"]) for row in steps] == sorted(float(row["time"]) for row in steps)
    assert list(epochs[0]) == list(EPOCH_COLUMNS)
    for row, entry in zip(epochs, history.epochs):
        for key in ("epoch", "train_loss", "train_accuracy", "val_loss", "val_accuracy", "steps"):
            assert row[key] == cell(entry[key]), key
    assert [row["step"] for row in epochs] == ["3", "6"]
    assert epochs[1]["peak_memory_bytes"] == str(max(entry["memory_bytes"] for entry in history.steps[3:]))
    assert not logger._steps.is_open and not logger._epochs.is_open  # closed at the end of fit


def test_jsonl_logger_keeps_keys_other_callbacks_add(tmp_path):
    class Tag(Callback):
        def on_train_batch_end(self, trainer, metrics):
            metrics["tag"] = f"t{metrics['step']}"

    logger = JSONLinesLogger(tmp_path)
    trainer = make_trainer(Tag(), logger)
    trainer.fit(DataLoader(data(), batch_size=16), epochs=1)
    steps, epochs = read_jsonl(logger.step_path), read_jsonl(logger.epoch_path)
    assert [row["tag"] for row in steps] == ["t1", "t2", "t3"]
    assert [row["loss"] for row in steps] == trainer.history.column("loss")
    assert steps[0]["host_rss"] is None  # no monitor: no RSS reading
    assert epochs[0]["val_loss"] is None and epochs[0]["train_loss"] == trainer.history.epochs[0]["train_loss"]


def test_rows_are_on_disk_while_training_runs(tmp_path):
    logger = CSVLogger(tmp_path)
    seen = []

    class Reader(Callback):
        def on_train_batch_end(self, trainer, metrics):
            seen.append(len(read_csv(logger.step_path)))

        def on_train_epoch_end(self, trainer, epoch, metrics):
            seen.append(("epochs", len(read_csv(logger.epoch_path))))

    make_trainer(logger, Reader()).fit(DataLoader(data(), batch_size=16), epochs=2)
    assert seen == [1, 2, 3, ("epochs", 1), 4, 5, 6, ("epochs", 2)]


def test_every_n_steps(tmp_path):
    logger = CSVLogger(tmp_path, every_n_steps=2)
    make_trainer(logger).fit(DataLoader(data(), batch_size=8), epochs=1)
    assert [row["step"] for row in read_csv(logger.step_path)] == ["2", "4", "6"]
    with pytest.raises(ValueError, match="every_n_steps must be a positive int"):
        CSVLogger(tmp_path, every_n_steps=0)


def test_a_new_run_replaces_the_files_and_a_resumed_one_appends(tmp_path):
    (tmp_path / "steps.csv").write_text("old,run\n1,2\n")
    logger = CSVLogger(tmp_path)
    trainer = make_trainer(logger)
    trainer.fit(DataLoader(data(), batch_size=16), epochs=1)
    assert [row["step"] for row in read_csv(logger.step_path)] == ["1", "2", "3"]
    trainer.save_checkpoint(tmp_path / "run.npz")

    trainer.fit(DataLoader(data(), batch_size=16), epochs=1)  # the run goes on past the checkpoint
    assert len(read_csv(logger.step_path)) == 6

    resumed = make_trainer(CSVLogger(tmp_path)).load_checkpoint(tmp_path / "run.npz")
    resumed.fit(DataLoader(data(), batch_size=16), epochs=1)
    steps = read_csv(logger.step_path)
    assert [row["step"] for row in steps] == ["1", "2", "3", "4", "5", "6"]  # rows 4-6 replaced, not doubled
    assert [float(row["loss"]) for row in steps] == resumed.history.column("loss")
    assert [row["epoch"] for row in read_csv(logger.epoch_path)] == ["1", "2"]


@pytest.mark.parametrize("logger_class", [CSVLogger, JSONLinesLogger])
def test_parse_rows_reads_back_what_the_logger_writes(tmp_path, logger_class):
    logger = logger_class(tmp_path)
    rows = [{"step": 1, "loss": 0.25}, {"step": 2, "loss": 0.125}]
    text = logger.header(("step", "loss")) + logger.format_rows(rows, ("step", "loss"))
    assert [(int(row["step"]), float(row["loss"])) for row in logger.parse_rows(text)] == [(1, 0.25), (2, 0.125)]


def test_files_are_closed_when_fit_raises(tmp_path):
    class Explode(Callback):
        def on_train_batch_end(self, trainer, metrics):
            if metrics["step"] == 2:
                raise RuntimeError("boom")

    logger = CSVLogger(tmp_path)
    trainer = make_trainer(logger, Explode())
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(DataLoader(data(), batch_size=16), epochs=1)
    assert not logger._steps.is_open and not logger._epochs.is_open
    assert len(read_csv(logger.step_path)) == 2
    with pytest.raises(RuntimeError, match="writes only during fit"):
        logger.on_train_batch_end(trainer, {"step": 1, "live_nodes": 0, "memory_bytes": 0})


def test_history_exports_round_trip(tmp_path):
    trainer = make_trainer()
    history = trainer.fit(DataLoader(data(), batch_size=16), epochs=2)
    history.to_json(tmp_path / "history.json")
    loaded = History.from_json(tmp_path / "history.json")
    assert loaded.steps == history.steps and loaded.epochs == history.epochs
    history.to_csv(tmp_path / "epochs.csv")
    history.to_csv(tmp_path / "steps.csv", per="steps")
    epochs, steps = read_csv(tmp_path / "epochs.csv"), read_csv(tmp_path / "steps.csv")
    assert [float(row["train_loss"]) for row in epochs] == history.column("train_loss", per="epochs")
    assert epochs[0]["val_loss"] == ""
    assert [float(row["loss"]) for row in steps] == history.column("loss")
    with pytest.raises(ValueError, match="per must be 'steps' or 'epochs'"):
        history.to_csv(tmp_path / "x.csv", per="batches")


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "file.txt"
    path.write_text("old")
    os.chmod(path, 0o640)
    with pytest.raises(KeyboardInterrupt):
        with atomic_write(path) as stream:
            stream.write("half of the new")
            raise KeyboardInterrupt
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["file.txt"]
    with atomic_write(path) as stream:
        stream.write("new")
    assert path.read_text() == "new"
    assert os.stat(path).st_mode & 0o777 == 0o640  # the replaced file keeps its permissions


def test_monitor_exports_are_atomic(tmp_path, monkeypatch):
    monitor = MemoryMonitor()
    for _ in range(3):
        monitor.step()
    monitor.to_csv(tmp_path / "monitor.csv")
    before = (tmp_path / "monitor.csv").read_text()

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(io_module.json, "dumps", crash)  # the one row writer formats every row
    monkeypatch.setattr(io_module.csv, "DictWriter", crash)
    for export in (monitor.to_csv, monitor.to_jsonl):
        with pytest.raises(OSError, match="disk full"):
            export(tmp_path / "monitor.csv")
    monitor.close()
    assert (tmp_path / "monitor.csv").read_text() == before
    assert os.listdir(tmp_path) == ["monitor.csv"]


def test_trainer_plot_draws_one_png_with_four_panels(tmp_path):
    plt = pytest.importorskip("matplotlib.pyplot")
    trainer = make_trainer(monitor=MemoryMonitor())
    trainer.fit(DataLoader(data(), batch_size=16), epochs=2, val_loader=DataLoader(data(16, 1), batch_size=8))
    trainer.plot(tmp_path / "training.png")
    image = plt.imread(tmp_path / "training.png")
    assert image.shape[:2] == (800, 1200)
    assert image.std() > 0.05  # not a blank canvas
    assert os.listdir(tmp_path) == ["training.png"]


def test_plot_before_fit_says_so(tmp_path):
    pytest.importorskip("matplotlib")
    with pytest.raises(ValueError, match="call fit"):
        make_trainer().plot(tmp_path / "training.png")


def test_plot_without_matplotlib_names_the_install_and_the_alternatives(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    with pytest.raises(ImportError, match=r"Trainer.plot needs matplotlib: pip install 'needle-dl\[plot\]'") as info:
        plot_module.plot_training(History([{"step": 1}]), [], tmp_path / "training.png")
    assert "trainer.history.to_csv(path)" in str(info.value)
    with pytest.raises(ImportError, match=r"MemoryMonitor.plot needs matplotlib"):
        plot_module.plot_history([], tmp_path / "memory.png")
    assert os.listdir(tmp_path) == []
