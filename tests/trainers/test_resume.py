"""A run stopped mid-epoch resumes at the exact batch: same data order and position, and final
parameters bitwise equal to an uninterrupted run. Also: fit refuses an empty loader, and a
failed load_checkpoint changes nothing."""
import numpy as np
import pytest

from needle import nn, optim
from needle.data import DataLoader, NDArrayDataset
from trainers.callbacks import Callback
from trainers.callbacks.checkpoint import load_checkpoint, save_checkpoint
from trainers.trainer import Trainer

EPOCHS = 3
STOP_AT = 22  # global step: the 7th of the 15 batches of epoch 2


def dataset():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((240, 12)).astype(np.float32)
    y = (X[:, :4].argmax(axis=1)).astype(np.uint8)
    return NDArrayDataset(X, y)


def loader():
    return DataLoader(dataset(), batch_size=16, shuffle=True)


def build(seed, optimizer_name, callbacks=()):
    """A fresh model (with Dropout: training draws from numpy's RNG too), optimizer and trainer."""
    np.random.seed(seed)
    model = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Dropout(0.2), nn.Linear(24, 4))
    if optimizer_name == "sgd":
        optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    else:
        optimizer = optim.Adam(model.parameters(), lr=1e-2)
    return Trainer(model, optimizer, monitor=False, progress=False, callbacks=callbacks)


class Crash(Exception):
    """Stands for whatever stops a run (a kill, a power cut) right after a checkpoint."""


class SaveThenCrash(Callback):
    def __init__(self, path, step):
        self.path, self.step = path, step

    def on_train_batch_end(self, trainer, metrics):
        if metrics["step"] == self.step:
            trainer.save_checkpoint(self.path)
            raise Crash()


def assert_same_run(straight, resumed):
    for a, b in zip(straight.model.parameters(), resumed.model.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    straight_state, resumed_state = straight.optimizer.state_dict(), resumed.optimizer.state_dict()
    for index, entry in straight_state["state"].items():
        for name, array in entry.items():
            np.testing.assert_array_equal(array, resumed_state["state"][index][name])
    assert resumed.history.column("loss") == straight.history.column("loss")
    assert resumed.history.column("step") == straight.history.column("step")
    drop_seconds = lambda epochs: [{k: v for k, v in e.items() if k != "seconds"} for e in epochs]  # noqa: E731
    assert drop_seconds(resumed.history.epochs) == drop_seconds(straight.history.epochs)


@pytest.mark.parametrize("optimizer_name", ["sgd", "adam"])
def test_a_checkpoint_taken_mid_epoch_resumes_at_the_next_batch_bitwise(tmp_path, optimizer_name):
    straight = build(0, optimizer_name)
    straight.fit(loader(), epochs=EPOCHS)

    path = tmp_path / "mid-epoch.npz"
    crashed = build(0, optimizer_name, callbacks=[SaveThenCrash(path, STOP_AT)])
    with pytest.raises(Crash):
        crashed.fit(loader(), epochs=EPOCHS)
    saved = load_checkpoint(path)
    assert saved["epoch"] == 1 and saved["epoch_in_progress"]["batches_done"] == STOP_AT - 15

    np.random.rand(5)  # draws between the crash and the resume must not matter
    resumed = build(1, optimizer_name)  # a new process: other weights, other RNG state
    resumed.load_checkpoint(path)
    assert (resumed.epoch, resumed.global_step) == (1, STOP_AT)
    resumed.fit(loader(), epochs=EPOCHS - resumed.epoch)
    assert_same_run(straight, resumed)


def test_resuming_without_the_position_would_differ(tmp_path):
    """Guards the test above: restarting the interrupted epoch from its first batch changes the result."""
    straight = build(0, "sgd")
    straight.fit(loader(), epochs=EPOCHS)
    path = tmp_path / "mid-epoch.npz"
    with pytest.raises(Crash):
        build(0, "sgd", callbacks=[SaveThenCrash(path, STOP_AT)]).fit(loader(), epochs=EPOCHS)
    state = load_checkpoint(path)
    state["epoch_in_progress"] = None
    save_checkpoint(path, state)
    resumed = build(1, "sgd")
    resumed.load_checkpoint(path)
    resumed.fit(loader(), epochs=EPOCHS - resumed.epoch)
    assert not all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(straight.model.parameters(), resumed.model.parameters()))


def test_a_second_fit_after_an_error_mid_epoch_finishes_that_epoch():
    straight = build(0, "sgd")
    straight.fit(loader(), epochs=EPOCHS)

    class FailOnce(Callback):
        failed = False

        def on_train_batch_end(self, trainer, metrics):
            if metrics["step"] == STOP_AT and not self.failed:
                self.failed = True
                raise Crash()

    interrupted = build(0, "sgd", callbacks=[FailOnce()])
    with pytest.raises(Crash):
        interrupted.fit(loader(), epochs=EPOCHS)
    interrupted.fit(loader(), epochs=EPOCHS - interrupted.epoch)
    assert_same_run(straight, interrupted)


def test_a_list_of_batches_resumes_by_skipping_the_applied_ones(tmp_path):
    batches = list(DataLoader(dataset(), batch_size=16))
    straight = build(0, "adam")
    straight.fit(batches, epochs=2)
    path = tmp_path / "list.npz"
    with pytest.raises(Crash):
        build(0, "adam", callbacks=[SaveThenCrash(path, 20)]).fit(batches, epochs=2)
    resumed = build(1, "adam")
    resumed.load_checkpoint(path)
    resumed.fit(batches, epochs=1)
    assert_same_run(straight, resumed)


# ---- empty loaders ----------------------------------------------------------------------------

@pytest.mark.parametrize("empty", [
    [],
    DataLoader(NDArrayDataset(np.zeros((3, 12), np.float32), np.zeros(3, np.uint8)), batch_size=4, drop_last=True),
], ids=["empty-list", "drop-last-of-too-few"])
def test_fit_on_an_empty_loader_raises_and_records_nothing(empty):
    trainer = build(0, "sgd")
    weights = [p.numpy().copy() for p in trainer.model.parameters()]
    with pytest.raises(ValueError, match="train_loader that yields no batches"):
        trainer.fit(empty, epochs=1)
    assert trainer.history.epochs == [] and trainer.history.steps == [] and trainer.epoch == 0
    for param, before in zip(trainer.model.parameters(), weights):
        np.testing.assert_array_equal(param.numpy(), before)


def test_a_generator_used_up_by_the_first_epoch_is_reported_at_the_second():
    batches = list(DataLoader(dataset(), batch_size=60))
    trainer = build(0, "sgd")
    with pytest.raises(ValueError, match="yields no batches.*generator is used up"):
        trainer.fit((batch for batch in batches), epochs=2)
    assert [e["epoch"] for e in trainer.history.epochs] == [1]


# ---- load_checkpoint is all or nothing ----------------------------------------------------------

def trained(optimizer_name):
    trainer = build(0, optimizer_name)
    trainer.fit(loader(), epochs=1)
    return trainer


def snapshot(trainer):
    return (
        [p.numpy().copy() for p in trainer.model.parameters()],
        trainer.optimizer.state_dict(),
        trainer.epoch,
        trainer.global_step,
        len(trainer.history.steps),
        np.random.get_state()[1].copy(),
    )


def assert_unchanged(trainer, before):
    after = snapshot(trainer)
    for a, b in zip(after[0], before[0]):
        np.testing.assert_array_equal(a, b)
    assert after[1]["hyperparameters"] == before[1]["hyperparameters"]
    for index, entry in before[1]["state"].items():
        for name, array in entry.items():
            np.testing.assert_array_equal(after[1]["state"][index][name], array)
    assert after[2:5] == before[2:5]
    np.testing.assert_array_equal(after[5], before[5])


def test_an_adam_checkpoint_into_an_sgd_trainer_changes_nothing(tmp_path):
    path = tmp_path / "adam.npz"
    adam = trained("adam")
    adam.fit(loader(), epochs=1)
    adam.save_checkpoint(path)
    sgd = trained("sgd")
    before = snapshot(sgd)
    with pytest.raises(ValueError, match=r"the checkpoint's optimizer is Adam, this trainer's is SGD"):
        sgd.load_checkpoint(path)
    assert_unchanged(sgd, before)


@pytest.mark.parametrize("corrupt, message", [
    (lambda s: s.update(numpy_random_state=("MT19937", np.zeros(3, np.uint32), 0, 0, 0.0)), "numpy_random_state is not"),
    (lambda s: s.update(numpy_random_state="seed 0"), "numpy_random_state is not"),
    (lambda s: s.update(epoch=-1), "epoch must be an int >= 0"),
    (lambda s: s.update(global_step="3"), "global_step must be an int >= 0"),
    (lambda s: s["history"].update(steps=None), r"history\['steps'\] must be a list"),
    (lambda s: s.pop("optimizer"), r"missing entries \['optimizer'\]"),
    (lambda s: s.update(epoch_in_progress={"epoch": 9, "batches_done": 1, "loader": None}), "epoch_in_progress is malformed"),
])
def test_a_malformed_trainer_state_changes_nothing(tmp_path, corrupt, message):
    path = tmp_path / "state.npz"
    source = build(3, "sgd")
    source.fit(loader(), epochs=2)
    state = source.state_dict()
    corrupt(state)
    save_checkpoint(path, state)
    trainer = trained("sgd")
    before = snapshot(trainer)
    with pytest.raises(ValueError, match=message):
        trainer.load_checkpoint(path)
    assert_unchanged(trainer, before)


def test_a_model_that_does_not_fit_changes_nothing(tmp_path):
    path = tmp_path / "state.npz"
    source = trained("sgd")
    state = source.state_dict()
    state["model"]["0.weight"] = np.zeros((2, 2), np.float32)
    save_checkpoint(path, state)
    trainer = trained("sgd")
    trainer.model.parameters()[0].data = trainer.model.parameters()[0] * 2  # differ from the source
    before = snapshot(trainer)
    with pytest.raises(ValueError, match="0.weight"):
        trainer.load_checkpoint(path)
    assert_unchanged(trainer, before)


def test_a_checkpoint_saved_at_epoch_end_has_no_epoch_in_progress(tmp_path):
    from trainers.callbacks.checkpoint import Checkpoint

    path = tmp_path / "end.npz"
    trainer = build(0, "sgd", callbacks=[Checkpoint(path)])
    trainer.fit(loader(), epochs=1)
    assert load_checkpoint(path)["epoch_in_progress"] is None
    build(1, "sgd").load_checkpoint(path)  # and it loads


def test_a_checkpoint_saved_after_the_last_batch_finishes_the_epoch_on_resume(tmp_path):
    straight = build(0, "adam")
    straight.fit(loader(), epochs=2)
    path = tmp_path / "last-batch.npz"
    with pytest.raises(Crash):
        build(0, "adam", callbacks=[SaveThenCrash(path, 15)]).fit(loader(), epochs=2)
    resumed = build(1, "adam")
    resumed.load_checkpoint(path)
    assert resumed.epoch == 0
    resumed.fit(loader(), epochs=2)
    assert_same_run(straight, resumed)


def test_an_optimizer_state_that_does_not_fit_leaves_the_model_as_it_was(tmp_path):
    """The model loads first; when the optimizer then refuses its part, the model is put back."""
    path = tmp_path / "state.npz"
    source = build(5, "sgd")
    source.fit(loader(), epochs=1)
    state = source.state_dict()
    state["optimizer"]["state"][0]["momentum_buffer"] = np.zeros((3, 3), np.float32)
    del state["optimizer"]["optimizer"]  # as an older checkpoint, without the optimizer's name
    save_checkpoint(path, state)
    trainer = trained("sgd")
    before = snapshot(trainer)
    with pytest.raises(ValueError, match=r"state 'momentum_buffer' has shape \(3, 3\)"):
        trainer.load_checkpoint(path)
    assert_unchanged(trainer, before)
