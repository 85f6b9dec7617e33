"""TensorBoardLogger's event files, read back with TensorBoard's own event reader."""
import sys

import numpy as np
import pytest

import needle as ndl
from needle.data import DataLoader, NDArrayDataset
from trainers import Callback, MemoryMonitor, TensorBoardLogger, Trainer

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def loader(count=40, seed=0, shuffle=True):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((count, 3)).astype(np.float32)
    return DataLoader(NDArrayDataset(X, (X[:, 0] > 0).astype(np.uint8)), batch_size=8, shuffle=shuffle)


def make_trainer(*callbacks):
    np.random.seed(0)
    model = ndl.nn.Sequential(ndl.nn.Linear(3, 8), ndl.nn.ReLU(), ndl.nn.Linear(8, 2))
    return Trainer(model, ndl.optim.SGD(model.parameters(), lr=0.2), monitor=MemoryMonitor(warn="ignore"),
                   progress=False, callbacks=list(callbacks))


def read_scalars(log_dir):
    events = event_accumulator.EventAccumulator(str(log_dir))
    events.Reload()
    return {tag: [(event.step, event.value) for event in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_steps_and_epochs_are_read_back_by_tensorboard(tmp_path):
    trainer = make_trainer(TensorBoardLogger(tmp_path / "tb"))
    history = trainer.fit(loader(), epochs=2, val_loader=loader(16, seed=1, shuffle=False))
    scalars = read_scalars(tmp_path / "tb")
    assert set(scalars) == {
        "train/loss", "train/accuracy", "train/lr", "graph/live_nodes", "memory/live_bytes", "memory/host_rss",
        "epoch/train_loss", "epoch/train_accuracy", "epoch/val_loss", "epoch/val_accuracy", "epoch/epoch",
    }
    steps = list(range(1, 11))
    for tag, key in (("train/loss", "loss"), ("train/accuracy", "accuracy"), ("graph/live_nodes", "live_nodes"),
                     ("memory/live_bytes", "memory_bytes")):
        assert [step for step, _ in scalars[tag]] == steps, tag
        assert [value for _, value in scalars[tag]] == pytest.approx(history.column(key), rel=1e-6), tag
    assert [value for _, value in scalars["train/lr"]] == pytest.approx([0.2] * 10)
    assert all(value > 1e6 for _, value in scalars["memory/host_rss"])  # a Python process holds megabytes
    for tag, key in (("epoch/train_loss", "train_loss"), ("epoch/val_loss", "val_loss"),
                     ("epoch/val_accuracy", "val_accuracy"), ("epoch/epoch", "epoch")):
        assert [step for step, _ in scalars[tag]] == [5, 10], tag
        assert [value for _, value in scalars[tag]] == pytest.approx(history.column(key, per="epochs"), rel=1e-6)


def test_without_validation_there_are_no_validation_tags_and_every_n_steps_thins_the_steps(tmp_path):
    make_trainer(TensorBoardLogger(tmp_path, every_n_steps=3)).fit(loader(), epochs=2)
    scalars = read_scalars(tmp_path)
    assert "epoch/val_loss" not in scalars and "epoch/train_loss" in scalars
    assert [step for step, _ in scalars["train/loss"]] == [3, 6, 9]


class SaveAtEpoch(Callback):
    def __init__(self, path, epoch):
        self.path, self.epoch = path, epoch

    def on_train_epoch_end(self, trainer, epoch, metrics):
        if epoch == self.epoch:
            trainer.save_checkpoint(self.path)


def test_a_resumed_run_replaces_what_was_written_past_its_checkpoint(tmp_path):
    make_trainer(TensorBoardLogger(tmp_path / "straight")).fit(loader(), epochs=3)
    checkpoint = tmp_path / "epoch1.npz"
    make_trainer(TensorBoardLogger(tmp_path / "resumed"), SaveAtEpoch(checkpoint, 1)).fit(loader(), epochs=2)
    resumed = make_trainer(TensorBoardLogger(tmp_path / "resumed"))
    resumed.load_checkpoint(checkpoint)
    resumed.fit(loader(), epochs=2)
    got, expected = read_scalars(tmp_path / "resumed"), read_scalars(tmp_path / "straight")
    assert [step for step, _ in got["train/loss"]] == list(range(1, 16))  # epoch 2 once, not twice
    for tag in ("train/loss", "epoch/train_loss", "epoch/epoch"):
        assert got[tag] == expected[tag], tag


def test_without_tensorboard_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # import tensorboard... now raises ImportError
    for name in [name for name in sys.modules if name.startswith("tensorboard.")]:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=r"pip install 'needle-dl\[tensorboard\]'"):
        TensorBoardLogger("runs")


@pytest.mark.parametrize("every", [0, -1, 1.5, True])
def test_every_n_steps_must_be_a_positive_int(every):
    with pytest.raises(ValueError, match="every_n_steps must be a positive int"):
        TensorBoardLogger("runs", every_n_steps=every)


def test_writing_outside_fit_is_refused(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    with pytest.raises(RuntimeError, match="only during fit"):
        logger.on_train_epoch_end(make_trainer(), 1, {"train_loss": 1.0, "train_accuracy": 0.5})
    assert list(tmp_path.iterdir()) == []  # making the logger writes nothing
