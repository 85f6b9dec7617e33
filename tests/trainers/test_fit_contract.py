"""Trainer.fit refuses loaders, models and losses it cannot train on, says what it got, and a failed fit changes nothing."""
import json

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim
from needle.data import DataLoader, NDArrayDataset
from trainers import FitContractError, History, Trainer


def arrays(count=32):
    rng = np.random.default_rng(0)
    return rng.standard_normal((count, 4)).astype("float32"), rng.integers(0, 3, size=count).astype("uint8")


def good_loader(shuffle=True):
    return DataLoader(NDArrayDataset(*arrays()), batch_size=8, shuffle=shuffle)


def batchnorm_model():
    np.random.seed(0)
    return nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3))


class Wrapped(nn.Module):
    """A model that runs real layers, then hands back ``result(logits)`` (the logits themselves by default)."""

    def __init__(self):
        super().__init__()
        self.inner = batchnorm_model()
        self.result = lambda logits: logits

    def forward(self, X):
        logits = self.inner(X)  # updates BatchNorm's running statistics: a failed fit must undo it
        return self.result(logits)


def adam_trainer(model, **options):
    return Trainer(model, optim.Adam(model.parameters(), lr=0.1), monitor=False, progress=False, **options)


def everything(trainer):
    """All a fit could change: model state, optimizer state, counters, history, epoch position, numpy's RNG."""
    return {
        "model": {name: value.copy() for name, value in trainer.model.state_dict().items()},
        "optimizer": json.dumps(trainer.optimizer.state_dict(), default=lambda array: np.asarray(array).tolist(), sort_keys=True),
        "counters": (trainer.epoch, trainer.global_step),
        "history": json.dumps(trainer.history.state_dict()),
        "position": trainer.state_dict()["epoch_in_progress"],
        "random": np.random.get_state()[1].copy(),
    }


def assert_same(before, after):
    assert before.keys() == after.keys()
    for name in before["model"]:
        np.testing.assert_array_equal(after["model"][name], before["model"][name], err_msg=name)
    for key in ("optimizer", "counters", "history", "position"):
        assert after[key] == before[key], key
    np.testing.assert_array_equal(after["random"], before["random"])


class Yielding:
    """A loader that yields the given batches, as a list would."""

    def __init__(self, *batches):
        self.batches = batches

    def __len__(self):
        return len(self.batches)

    def __iter__(self):
        return iter(self.batches)


def tensor(array, dtype="float32"):
    return ndl.Tensor(array, dtype=dtype, requires_grad=False)


X, Y = arrays(8)


def returning(result):
    def breaks(trainer):
        trainer.model.result = result
    return breaks


def loss(loss_fn):
    def breaks(trainer):
        trainer.loss_fn = loss_fn
    return breaks


def unchanged(trainer):
    pass


@pytest.mark.parametrize(
    "break_it, loader, words",
    [
        pytest.param(unchanged, lambda: None, r"fit: train_loader must be an iterable of \(X, y\) batches, .*DataLoader.*; got NoneType", id="fit-none"),
        pytest.param(unchanged, lambda: 3, r"train_loader must be an iterable .* got int", id="fit-int"),
        pytest.param(unchanged, lambda: tensor(X), r"train_loader must be an iterable .* got Tensor", id="fit-tensor"),
        pytest.param(
            unchanged, lambda: Yielding((tensor(X), tensor(Y, "int64"), tensor(Y))),
            r"fit: train_loader batch 0 is a tuple of 3 \(Tensor, Tensor, Tensor\); expected an \(X, y\) pair of Tensors", id="batch-triple",
        ),
        pytest.param(
            unchanged, lambda: Yielding(tensor(X)),
            r"train_loader batch 0 is a Tensor of shape \(8, 4\); expected an \(X, y\) pair", id="batch-bare-tensor",
        ),
        pytest.param(
            unchanged, lambda: Yielding((X, tensor(Y, "int64"))),
            r"train_loader batch 0 has X of type ndarray; expected needle Tensors", id="batch-numpy-x",
        ),
        pytest.param(
            returning(lambda logits: logits.numpy()), good_loader,
            r"fit: the model's forward returned ndarray; a model's forward must return one needle Tensor of logits computed from its parameters",
            id="forward-numpy",
        ),
        pytest.param(
            returning(lambda logits: (logits, logits)), good_loader,
            r"the model's forward returned a tuple of 2; .* return the logits only", id="forward-tuple",
        ),
        pytest.param(
            returning(lambda logits: ndl.Tensor(logits.numpy(), requires_grad=False)), good_loader,
            r"fit: the loss does not depend on any parameter .* computed from its parameters .*not a Tensor made from numpy values",
            id="forward-rewrapped",
        ),
        pytest.param(
            loss(lambda logits, y: logits * logits), good_loader,
            r"fit: loss_fn returned a Tensor of shape \(8, 3\); it must return a scalar .* reduce it", id="loss-not-scalar",
        ),
        pytest.param(loss(lambda logits, y: 0.5), good_loader, r"fit: loss_fn returned float; it must return a scalar needle Tensor", id="loss-float"),
    ],
)
def test_a_refused_fit_names_the_problem_and_changes_nothing(break_it, loader, words):
    trainer = adam_trainer(Wrapped())
    trainer.fit(good_loader(shuffle=False), epochs=1)  # some optimizer state and history to keep
    good_model, good_loss = trainer.model.result, trainer.loss_fn
    break_it(trainer)
    train_loader = loader()
    np.random.seed(5)
    before = everything(trainer)
    with pytest.raises(FitContractError, match=words) as caught:
        trainer.fit(train_loader, epochs=2)
    assert "requires_grad=False)" not in str(caught.value)  # never advise cutting the graph
    assert isinstance(caught.value, TypeError)
    assert_same(before, everything(trainer))
    # and so the next fit is the one an undisturbed trainer makes
    trainer.model.result, trainer.loss_fn = good_model, good_loss
    undisturbed = adam_trainer(Wrapped())
    undisturbed.fit(good_loader(shuffle=False), epochs=1)
    np.random.seed(5)
    trainer.fit(good_loader(), epochs=1)
    np.random.seed(5)
    undisturbed.fit(good_loader(), epochs=1)
    for name, value in undisturbed.model.state_dict().items():
        np.testing.assert_array_equal(trainer.model.state_dict()[name], value, err_msg=name)
    for key in ("step", "epoch", "loss", "accuracy", "batch_size"):  # live_nodes and seconds depend on the machine
        assert trainer.history.column(key) == undisturbed.history.column(key), key
    assert trainer.history.column("train_loss", per="epochs") == undisturbed.history.column("train_loss", per="epochs")


def test_the_refusals_do_not_stop_a_fit_that_works():
    trainer = adam_trainer(batchnorm_model())
    history = trainer.fit(good_loader(), epochs=2)
    assert len(history.epochs) == 2 and trainer.global_step == 8


def test_a_fresh_trainer_refused_at_its_first_batch_is_left_fresh():
    model = Wrapped()
    model.result = lambda logits: logits.numpy()
    trainer = adam_trainer(model)
    before = everything(trainer)
    with pytest.raises(FitContractError, match="forward returned ndarray"):
        trainer.fit(good_loader(), epochs=1)
    assert_same(before, everything(trainer))
    assert trainer.state_dict()["epoch_in_progress"] is None


def test_evaluate_names_a_bad_loader_and_a_bad_forward():
    trainer = adam_trainer(batchnorm_model())
    with pytest.raises(FitContractError, match=r"fit: loader must be an iterable"):
        trainer.evaluate(None)
    with pytest.raises(FitContractError, match=r"loader batch 0 is a tuple of 1"):
        trainer.evaluate(Yielding((tensor(X),)))
    trainer.model = Wrapped()
    trainer.model.result = lambda logits: (logits,)
    with pytest.raises(FitContractError, match=r"forward returned a tuple of 1"):
        trainer.evaluate(good_loader())
    assert trainer.model.training  # evaluate restores the mode even on error


def test_a_bad_val_loader_is_refused_before_training():
    trainer = adam_trainer(batchnorm_model())
    before = everything(trainer)
    with pytest.raises(FitContractError, match=r"fit: val_loader must be an iterable .* got int"):
        trainer.fit(good_loader(), epochs=1, val_loader=7)
    assert_same(before, everything(trainer))


# ---- History.from_json ----------------------------------------------------------------------------
def written_history(tmp_path):
    path = tmp_path / "history.json"
    History([{"step": 1, "epoch": 1, "loss": 0.5}], [{"epoch": 1, "train_loss": 0.5}]).to_json(path)
    return path


def test_history_from_a_truncated_file_names_the_file(tmp_path):
    path = written_history(tmp_path)
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match=r"History.from_json: .*history\.json is not valid JSON .* at line \d+, column \d+; a truncated file") as caught:
        History.from_json(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"[1, 2]", id="a-list"),
        pytest.param(b'{"steps": []}', id="no-epochs"),
        pytest.param(b'{"steps": [1], "epochs": []}', id="steps-not-dicts"),
        pytest.param(b'{"steps": {}, "epochs": []}', id="steps-a-dict"),
    ],
)
def test_history_from_json_that_is_not_a_history_names_the_file(tmp_path, content):
    path = tmp_path / "other.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"History.from_json: .*other\.json is JSON but not a history: expected"):
        History.from_json(path)


def test_history_from_a_binary_file_names_the_file(tmp_path):
    path = tmp_path / "history.json"
    path.write_bytes(b'{"steps": [\xff]}')
    with pytest.raises(ValueError, match=r"history\.json is not valid JSON"):
        History.from_json(path)


def test_history_round_trip_still_works(tmp_path):
    loaded = History.from_json(written_history(tmp_path))
    assert loaded.steps == [{"step": 1, "epoch": 1, "loss": 0.5}] and loaded.epochs == [{"epoch": 1, "train_loss": 0.5}]
