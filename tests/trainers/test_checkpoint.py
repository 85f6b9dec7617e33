"""Checkpoints: round trip, exact resume (parameters, momentum, shuffles), atomic writes, clear errors."""
import os

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim
from needle.data import DataLoader, NDArrayDataset, mnist, parse_mnist
from trainers import checkpoint as checkpoint_module
from trainers.checkpoint import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint
from trainers.trainer import Trainer


@pytest.fixture(scope="module")
def mnist_subset():
    """The first 2,000 training images, flattened."""
    files = mnist(download=False)
    X, y = parse_mnist(files.train_images, files.train_labels)
    return X[:2000], y[:2000]


def test_round_trip_keeps_structure_types_and_values(tmp_path):
    state = {
        "ints": 3,
        "floats": [0.5, float("nan"), float("inf")],
        "none": None,
        "flag": True,
        "text": "épsilon",
        0: {"u": np.arange(6, dtype=np.float32).reshape(2, 3)},
        "tuple": ("MT19937", np.arange(4, dtype=np.uint32), 2, 0, 0.0),
        "scalar": np.float32(1.5),
        "tensor": ndl.Tensor([1.0, 2.0]),
        "empty": {},
        "nested": [{"a": np.zeros((0, 2), dtype=np.int64)}],
    }
    path = tmp_path / "state.npz"
    save_checkpoint(path, state)
    loaded = load_checkpoint(path)
    assert list(loaded) == list(state)
    assert loaded["ints"] == 3 and loaded["none"] is None and loaded["flag"] is True and loaded["text"] == "épsilon"
    assert loaded["floats"][0] == 0.5 and np.isnan(loaded["floats"][1]) and loaded["floats"][2] == float("inf")
    np.testing.assert_array_equal(loaded[0]["u"], state[0]["u"])
    assert loaded[0]["u"].dtype == np.float32
    assert isinstance(loaded["tuple"], tuple) and loaded["tuple"][1].dtype == np.uint32
    assert type(loaded["scalar"]) is np.float32 and loaded["scalar"] == 1.5
    np.testing.assert_array_equal(loaded["tensor"], [1.0, 2.0])
    assert loaded["empty"] == {} and loaded["nested"][0]["a"].shape == (0, 2)


def test_unsupported_values_are_refused_before_writing(tmp_path):
    with pytest.raises(TypeError, match="set"):
        save_checkpoint(tmp_path / "bad.npz", {"x": {1, 2}})
    with pytest.raises(TypeError, match="keys"):
        save_checkpoint(tmp_path / "bad.npz", {(1, 2): 0})
    assert os.listdir(tmp_path) == []


def build(seed, optimizer_name):
    """A fresh model, optimizer and trainer; the seed fixes the initial weights."""
    np.random.seed(seed)
    model = nn.Sequential(nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))
    if optimizer_name == "sgd":
        optimizer = optim.SGD(model.parameters(), lr=0.2, momentum=0.9, weight_decay=1e-4)
    else:
        optimizer = optim.Adam(model.parameters(), lr=1e-3)
    return Trainer(model, optimizer, monitor=False, progress=False)


@pytest.mark.parametrize("optimizer_name", ["sgd", "adam"])
def test_resume_equals_training_straight_through(tmp_path, mnist_subset, optimizer_name):
    def shuffled():
        return DataLoader(NDArrayDataset(*mnist_subset), batch_size=100, shuffle=True)

    straight = build(0, optimizer_name)
    straight.fit(shuffled(), epochs=2)

    first = build(0, optimizer_name)
    first.fit(shuffled(), epochs=1)
    path = tmp_path / "epoch1.npz"
    first.save_checkpoint(path)
    np.random.rand(7)  # RNG draws between save and load must not matter
    resumed = build(1, optimizer_name)  # fresh everything, other initial weights
    assert resumed.load_checkpoint(path) is resumed
    assert (resumed.epoch, resumed.global_step) == (1, 20)
    resumed.fit(shuffled(), epochs=1)

    for a, b in zip(straight.model.parameters(), resumed.model.parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
    straight_state, resumed_state = straight.optimizer.state_dict(), resumed.optimizer.state_dict()
    assert straight_state["state"].keys() == resumed_state["state"].keys()
    for index, entry in straight_state["state"].items():
        for name, array in entry.items():  # SGD's momentum u, Adam's m and v
            np.testing.assert_allclose(array, resumed_state["state"][index][name], rtol=1e-6, atol=1e-8)
    assert resumed.history.column("step") == straight.history.column("step")
    np.testing.assert_allclose(resumed.history.column("loss"), straight.history.column("loss"), rtol=1e-5)
    assert [e["epoch"] for e in resumed.history.epochs] == [1, 2]


def test_checkpoint_without_rng_restore_would_differ(tmp_path, mnist_subset):
    """Guards the resume test: skipping the RNG restore changes the next epoch's shuffle."""
    trainer = build(0, "sgd")
    trainer.fit(DataLoader(NDArrayDataset(*mnist_subset), batch_size=100, shuffle=True), epochs=1)
    trainer.save_checkpoint(tmp_path / "c.npz")
    expected = np.random.permutation(10)
    np.random.rand(7)
    build(1, "sgd").load_checkpoint(tmp_path / "c.npz")
    np.testing.assert_array_equal(np.random.permutation(10), expected)


def crash_while_writing(stream, **arrays):
    stream.write(b"PK\x03\x04 half a zip file")
    raise KeyboardInterrupt("simulated crash mid-write")


def test_a_crash_mid_write_keeps_the_old_checkpoint_and_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "model.npz"
    save_checkpoint(path, {"version": "old", "weights": np.ones(3)})
    monkeypatch.setattr(checkpoint_module.np, "savez", crash_while_writing)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, {"version": "new", "weights": np.zeros(3)})
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["model.npz"]
    loaded = load_checkpoint(path)
    assert loaded["version"] == "old" and loaded["weights"].tolist() == [1.0, 1.0, 1.0]


def test_a_failed_rename_leaves_no_temporary_file(tmp_path, monkeypatch):
    def refuse(source, target):
        raise OSError("disk went away")

    monkeypatch.setattr(os, "replace", refuse)  # the shared trainers.atomic helper renames
    with pytest.raises(OSError, match="disk went away"):
        save_checkpoint(tmp_path / "model.npz", {"a": 1})
    monkeypatch.undo()
    assert os.listdir(tmp_path) == []


def test_missing_checkpoint_names_the_path(tmp_path):
    trainer = build(0, "sgd")
    with pytest.raises(FileNotFoundError, match="no checkpoint at .*nowhere.npz"):
        trainer.load_checkpoint(tmp_path / "nowhere.npz")


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # truncated
        lambda data: b"\x00" * len(data),  # garbage
        lambda data: b"",  # empty
    ],
    ids=["truncated", "garbage", "empty"],
)
def test_corrupt_checkpoint_names_the_path(tmp_path, damage):
    path = tmp_path / "broken.npz"
    build(0, "sgd").save_checkpoint(path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CheckpointError, match="broken.npz is not a readable trainer checkpoint"):
        build(0, "sgd").load_checkpoint(path)


def test_an_npz_that_is_not_a_checkpoint_is_refused(tmp_path):
    path = tmp_path / "weights.npz"
    np.savez(path, weights=np.ones(3))
    with pytest.raises(CheckpointError, match="weights.npz"):
        load_checkpoint(path)


def test_checkpoint_callback_saves_every_epoch(tmp_path, mnist_subset):
    path = tmp_path / "last.npz"
    loader = DataLoader(NDArrayDataset(mnist_subset[0][:400], mnist_subset[1][:400]), batch_size=100)
    trainer = build(0, "sgd")
    trainer.add_callback(Checkpoint(path))
    trainer.fit(loader, epochs=2)
    state = load_checkpoint(path)
    assert (state["epoch"], state["global_step"]) == (2, 8)
    assert [entry["epoch"] for entry in state["history"]["epochs"]] == [1, 2]
    with pytest.raises(ValueError, match="every"):
        Checkpoint(path, every=0)
