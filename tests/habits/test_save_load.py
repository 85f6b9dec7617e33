"""ndl.save / ndl.load: state dicts to one pickle-free .npz and back."""
import os

import numpy as np
import pytest

import needle as ndl
from needle import serialization


def test_a_model_and_its_optimizer_round_trip(tmp_path):
    model = ndl.nn.Sequential(ndl.nn.Linear(3, 4), ndl.nn.BatchNorm1d(4), ndl.nn.Linear(4, 2))
    opt = ndl.optim.Adam(model.parameters(), lr=0.01)
    loss = ndl.nn.CrossEntropyLoss()(model(ndl.Tensor(np.random.randn(5, 3).astype(np.float32))), ndl.Tensor([0, 1, 0, 1, 1], dtype="int64"))
    loss.backward()
    opt.step()
    path = tmp_path / "run.npz"
    ndl.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3}, path)
    state = ndl.load(path)
    copy = ndl.nn.Sequential(ndl.nn.Linear(3, 4), ndl.nn.BatchNorm1d(4), ndl.nn.Linear(4, 2))
    copy.load_state_dict(state["model"])
    copy_opt = ndl.optim.Adam(copy.parameters(), lr=0.5)
    copy_opt.load_state_dict(state["optimizer"])
    assert state["epoch"] == 3 and copy_opt.lr == 0.01
    for (name, a), (_, b) in zip(model.state_dict().items(), copy.state_dict().items()):
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_tensors_are_saved_as_arrays(tmp_path):
    path = tmp_path / "t.npz"
    ndl.save({"w": ndl.Tensor([1.0, 2.0]), "items": [1, (2.5, None), "x"]}, path)
    loaded = ndl.load(path)
    assert isinstance(loaded["w"], np.ndarray) and loaded["w"].tolist() == [1.0, 2.0]
    assert loaded["items"] == [1, (2.5, None), "x"]


def test_an_unsaveable_value_writes_nothing(tmp_path):
    path = tmp_path / "bad.npz"
    with pytest.raises(TypeError, match="cannot save a value of type object"):
        ndl.save({"x": object()}, path)
    assert os.listdir(tmp_path) == []


def test_a_missing_file_names_the_path_and_ndl_save(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no file at .*nowhere.npz.*ndl.save"):
        ndl.load(tmp_path / "nowhere.npz")


def test_a_pickled_or_corrupt_file_is_refused_naming_it(tmp_path):
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, __state__=np.array([{"a": 1}], dtype=object))
    with pytest.raises(serialization.StateFileError, match=r"pickled.npz is not a readable file") as caught:
        ndl.load(pickled)
    assert "allow_pickle" not in str(caught.value)
    truncated = tmp_path / "truncated.npz"
    ndl.save({"w": np.ones(1000)}, truncated)
    truncated.write_bytes(truncated.read_bytes()[:500])
    with pytest.raises(ValueError, match="truncated.npz is not a readable file"):
        ndl.load(truncated)


def test_checkpoints_written_before_ndl_save_still_load(tmp_path):
    import json

    legacy = tmp_path / "old.npz"
    blob = json.dumps({"format": "needle-trainer-checkpoint", "version": 1, "state": {"dict": [["epoch", 2]]}})
    np.savez(legacy, __state__=np.frombuffer(blob.encode(), dtype=np.uint8))
    assert ndl.load(legacy) == {"epoch": 2}
