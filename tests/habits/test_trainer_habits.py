"""Trainer(max_epochs=N).fit(loader) and Trainer(lr_scheduler=...), as Lightning users write them."""
import os

import numpy as np
import pytest

import needle as ndl
from needle.data import DataLoader, NDArrayDataset
from needle.optim.lr_scheduler import StepLR
from trainers import Trainer


def _setup(seed=0, **trainer_options):
    X = np.random.RandomState(0).randn(48, 3).astype(np.float32)  # the same data in every run
    np.random.seed(seed)
    y = (X[:, 0] > 0).astype(np.uint8)
    loader = DataLoader(NDArrayDataset(X, y), batch_size=16, shuffle=True)
    model = ndl.nn.Linear(3, 2)
    optimizer = ndl.optim.SGD(model.parameters(), lr=0.4)
    schedule = StepLR(optimizer, step_size=1, gamma=0.5) if trainer_options.pop("schedule", False) else None
    trainer = Trainer(model, optimizer, monitor=False, progress=False, lr_scheduler=schedule, **trainer_options)
    return trainer, loader


def test_max_epochs_is_the_total_fit_trains_to():
    trainer, loader = _setup(max_epochs=3)
    trainer.fit(loader)
    assert trainer.epoch == 3 and trainer.global_step == 9
    trainer.fit(loader)  # already there: nothing more
    assert trainer.epoch == 3 and len(trainer.history.epochs) == 3


def test_without_max_epochs_fit_adds_one_epoch_by_default():
    trainer, loader = _setup()
    trainer.fit(loader)
    trainer.fit(loader)
    assert trainer.epoch == 2


def test_epochs_and_max_epochs_together_are_refused_before_anything_runs():
    trainer, loader = _setup(max_epochs=2)
    weights = trainer.model.weight.numpy().copy()
    with pytest.raises(ValueError, match="max_epochs=2"):
        trainer.fit(loader, epochs=1)
    assert trainer.epoch == 0 and trainer.global_step == 0
    np.testing.assert_array_equal(trainer.model.weight.numpy(), weights)


@pytest.mark.parametrize("value", [-1, 1.5, True, "3"])
def test_a_bad_max_epochs_is_named(value):
    with pytest.raises(ValueError, match="max_epochs"):
        _setup(max_epochs=value)


def test_the_scheduler_steps_once_per_epoch():
    trainer, loader = _setup(max_epochs=3, schedule=True)
    seen = []

    from trainers import Callback

    class Rate(Callback):
        def on_train_epoch_start(self, trainer, epoch):
            seen.append(trainer.optimizer.lr)

    trainer.add_callback(Rate())
    trainer.fit(loader)
    np.testing.assert_allclose(seen, [0.4, 0.2, 0.1])
    assert trainer.optimizer.lr == pytest.approx(0.05)


def test_a_resumed_run_continues_the_schedule_exactly(tmp_path):
    whole, loader = _setup(max_epochs=3, schedule=True)
    whole.fit(loader)

    first, loader = _setup(max_epochs=1, schedule=True)
    first.fit(loader)
    path = os.path.join(tmp_path, "run.npz")
    first.save_checkpoint(path)
    resumed, loader = _setup(seed=5, max_epochs=3, schedule=True)
    resumed.load_checkpoint(path)
    assert resumed.optimizer.lr == pytest.approx(0.2)
    resumed.fit(loader)
    np.testing.assert_array_equal(resumed.model.weight.numpy(), whole.model.weight.numpy())
    assert resumed.optimizer.lr == whole.optimizer.lr


def test_a_scheduler_over_another_optimizer_is_refused():
    model = ndl.nn.Linear(2, 2)
    other = ndl.optim.SGD(ndl.nn.Linear(2, 2).parameters(), lr=0.1)
    with pytest.raises(ValueError, match="another optimizer"):
        Trainer(model, ndl.optim.SGD(model.parameters(), lr=0.1), lr_scheduler=StepLR(other, 1), progress=False)
    with pytest.raises(TypeError, match="lr_scheduler"):
        Trainer(model, other, lr_scheduler=0.5, progress=False)
