"""Callbacks: the documented hook order, registration order, early stopping, errors."""
import inspect

import numpy as np
import pytest

from needle import nn, optim
from needle.data import DataLoader, NDArrayDataset
from trainers.callbacks import HOOKS, Callback
from trainers.trainer import Trainer


def toy_loader(samples=12, batch_size=4):
    """A small separable 3-class problem: ``samples / batch_size`` batches."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((samples, 4)).astype(np.float32)
    y = X[:, :3].argmax(axis=1).astype(np.uint8)
    return DataLoader(NDArrayDataset(X, y), batch_size=batch_size)


def toy_trainer(callbacks, **options):
    np.random.seed(0)
    model = nn.Linear(4, 3)
    return Trainer(model, optim.SGD(model.parameters(), lr=0.1), monitor=False, progress=False, callbacks=callbacks, **options)


class Recorder(Callback):
    """Appends (name, hook, arguments after the trainer) to a shared log."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def on_fit_start(self, trainer):
        self.log.append((self.name, "on_fit_start"))

    def on_train_epoch_start(self, trainer, epoch):
        self.log.append((self.name, "on_train_epoch_start", epoch))

    def on_train_batch_end(self, trainer, record):
        self.log.append((self.name, "on_train_batch_end", record["step"]))

    def on_validation_end(self, trainer, epoch, metrics):
        self.log.append((self.name, "on_validation_end", epoch, sorted(metrics)))

    def on_train_epoch_end(self, trainer, epoch, metrics):
        self.log.append((self.name, "on_train_epoch_end", epoch, trainer.epoch, len(trainer.history.epochs)))

    def on_fit_end(self, trainer):
        self.log.append((self.name, "on_fit_end"))

    def on_exception(self, trainer, error):
        self.log.append((self.name, "on_exception", type(error).__name__))


def test_hooks_fire_in_documented_order():
    log = []
    trainer = toy_trainer([Recorder("only", log)])
    trainer.fit(toy_loader(), epochs=2, val_loader=toy_loader())
    calls = [entry[1:] for entry in log]
    epoch = lambda e, steps: [  # noqa: E731
        ("on_train_epoch_start", e),
        *[("on_train_batch_end", step) for step in steps],
        ("on_validation_end", e, ["accuracy", "loss"]),
        ("on_train_epoch_end", e, e, e),  # the epoch is counted and in history by then
    ]
    assert calls == [("on_fit_start",), *epoch(1, [1, 2, 3]), *epoch(2, [4, 5, 6]), ("on_fit_end",)]


def test_no_validation_hook_without_val_loader():
    log = []
    toy_trainer([Recorder("only", log)]).fit(toy_loader(), epochs=1)
    assert "on_validation_end" not in [entry[1] for entry in log]


def test_callbacks_run_in_registration_order_for_every_hook():
    log = []
    toy_trainer([Recorder("first", log), Recorder("second", log)]).fit(toy_loader(), epochs=1)
    names = [entry[0] for entry in log]
    assert names == ["first", "second"] * (len(log) // 2)
    assert [entry[1:] for entry in log[::2]] == [entry[1:] for entry in log[1::2]]


def test_add_callback_appends():
    log = []
    trainer = toy_trainer([Recorder("first", log)])
    trainer.add_callback(Recorder("added", log))
    trainer.fit(toy_loader(), epochs=1)
    assert [entry[0] for entry in log[:2]] == ["first", "added"]


class StopAtStep(Callback):
    def __init__(self, step):
        self.step = step

    def on_train_batch_end(self, trainer, record):
        if record["step"] == self.step:
            trainer.should_stop = True


class StopAtEpoch(Callback):
    def on_train_epoch_end(self, trainer, epoch, metrics):
        trainer.should_stop = epoch == 1


def test_should_stop_from_a_batch_ends_fit_after_that_batch():
    log = []
    trainer = toy_trainer([StopAtStep(2), Recorder("log", log)])
    trainer.fit(toy_loader(), epochs=3)
    assert trainer.global_step == 2
    assert [entry["steps"] for entry in trainer.history.epochs] == [2]  # the partial epoch is summarised
    assert log[-2][1] == "on_train_epoch_end" and log[-1][1] == "on_fit_end"


def test_should_stop_from_epoch_end_ends_fit_after_that_epoch():
    trainer = toy_trainer([StopAtEpoch()])
    trainer.fit(toy_loader(), epochs=3)
    assert trainer.epoch == 1 and trainer.global_step == 3
    trainer.fit(toy_loader(), epochs=1)  # a new fit starts afresh
    assert trainer.epoch == 2


def test_on_exception_replaces_on_fit_end_and_error_propagates():
    log = []

    class Boom(Callback):
        def on_train_batch_end(self, trainer, record):
            if record["step"] == 2:
                raise KeyError("boom")

    trainer = toy_trainer([Boom(), Recorder("log", log)])
    with pytest.raises(KeyError, match="boom"):
        trainer.fit(toy_loader(), epochs=1)
    hooks = [entry[1] for entry in log]
    assert hooks[-1] == "on_exception" and log[-1][2] == "KeyError"
    assert "on_fit_end" not in hooks


def test_batch_hook_can_extend_the_history_record():
    class AddLearningRate(Callback):
        def on_train_batch_end(self, trainer, record):
            record["lr"] = trainer.optimizer.lr

    trainer = toy_trainer([AddLearningRate()])
    trainer.fit(toy_loader(), epochs=1)
    assert trainer.history.column("lr") == [0.1, 0.1, 0.1]


def test_base_callback_hooks_are_documented_no_ops():
    callback, trainer = Callback(), toy_trainer([])
    arguments = {"on_train_epoch_start": (1,), "on_train_batch_end": ({},), "on_validation_end": (1, {}),
                 "on_train_epoch_end": (1, {}), "on_exception": (ValueError(),)}
    for hook in HOOKS:
        method = getattr(callback, hook)
        assert inspect.getdoc(method), f"{hook} has no docstring"
        assert method(trainer, *arguments.get(hook, ())) is None
    assert set(HOOKS) == {name for name in vars(Callback) if name.startswith("on_")}
