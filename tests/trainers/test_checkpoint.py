"""Checkpoints: round trip, exact resume (parameters, momentum, shuffles), atomic writes, clear errors."""
import json
import os
import zipfile

import numpy as np
import pytest

import needle as ndl
from needle import serialization
from needle import nn, optim
from needle.data import DataLoader, NDArrayDataset, mnist, parse_mnist
from trainers.callbacks import checkpoint as checkpoint_module
from trainers.callbacks.checkpoint import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint
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
    monkeypatch.setattr(serialization.np, "savez", crash_while_writing)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, {"version": "new", "weights": np.zeros(3)})
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["model.npz"]
    loaded = load_checkpoint(path)
    assert loaded["version"] == "old" and loaded["weights"].tolist() == [1.0, 1.0, 1.0]


def test_a_failed_rename_leaves_no_temporary_file(tmp_path, monkeypatch):
    def refuse(source, target):
        raise OSError("disk went away")

    monkeypatch.setattr(os, "replace", refuse)  # the shared trainers.io helper renames
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


# ---- files on disk: stale temporaries, modes, what is read, error messages ----------------------

CHILD_WRITER = r"""
import io, os, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
from trainers.callbacks import checkpoint

real_savez = np.savez

def write_half_then_hang(stream, **arrays):
    buffer = io.BytesIO()
    real_savez(buffer, **arrays)
    data = buffer.getvalue()
    stream.write(data[: len(data) // 2])
    stream.flush()
    os.fsync(stream.fileno())
    print("writing", flush=True)
    time.sleep(600)

np.savez = write_half_then_hang
checkpoint.save_checkpoint(sys.argv[2], {"version": "child", "weights": np.zeros(100000)})
"""


def temporaries(folder):
    return sorted(name for name in os.listdir(folder) if name.endswith(".tmp"))


@pytest.mark.skipif(os.name != "posix", reason="kill -9 and process ids are POSIX")
def test_a_writer_killed_mid_write_leaves_the_old_file_and_the_next_save_cleans_up(tmp_path):
    import signal
    import subprocess
    import sys

    path = tmp_path / "model.npz"
    save_checkpoint(path, {"version": "old", "weights": np.ones(3)})
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child = subprocess.Popen([sys.executable, "-c", CHILD_WRITER, root, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "writing"
        (live,) = temporaries(tmp_path)
        assert f".{child.pid}." in live
        save_checkpoint(tmp_path / "other.npz", {"a": 1})  # another checkpoint's save leaves it alone
        save_checkpoint(path, {"version": "while the child writes"})  # a live writer's file stays
        assert temporaries(tmp_path) == [live]
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    assert temporaries(tmp_path) == [live], "kill -9 leaves the half-written file behind"
    assert load_checkpoint(path)["version"] == "while the child writes"
    save_checkpoint(path, {"version": "new", "weights": np.zeros(2)})
    assert temporaries(tmp_path) == []
    assert sorted(os.listdir(tmp_path)) == ["model.npz", "other.npz"]
    assert load_checkpoint(path)["version"] == "new"


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o600, 0o664])
def test_replacing_a_checkpoint_keeps_its_mode(tmp_path, mode):
    path = tmp_path / "model.npz"
    save_checkpoint(path, {"a": 1})
    os.chmod(path, mode)
    save_checkpoint(path, {"a": 2})
    assert os.stat(path).st_mode & 0o777 == mode and load_checkpoint(path)["a"] == 2


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_a_new_checkpoint_gets_the_umask_default(tmp_path, umask):
    previous = os.umask(umask)
    try:
        save_checkpoint(tmp_path / "model.npz", {"a": 1})
    finally:
        os.umask(previous)
    assert os.stat(tmp_path / "model.npz").st_mode & 0o777 == 0o666 & ~umask


def test_saving_into_a_missing_folder_names_the_path(tmp_path):
    path = tmp_path / "no" / "such" / "model.npz"
    with pytest.raises(FileNotFoundError, match=r"cannot save the checkpoint .*model.npz: the folder .*such does not exist"):
        save_checkpoint(path, {"a": 1})


def test_saving_into_a_read_only_folder_names_the_path(tmp_path, monkeypatch):
    def refuse(name, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(name))

    import needle.atomic_file

    monkeypatch.setattr(needle.atomic_file.os, "open", refuse)  # root may write anywhere: simulate
    with pytest.raises(PermissionError, match=r"cannot save the checkpoint .*model.npz: no permission to write in"):
        save_checkpoint(tmp_path / "model.npz", {"a": 1})
    monkeypatch.undo()
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs POSIX permissions and a non-root user")
def test_saving_into_a_really_read_only_folder_names_the_path(tmp_path):
    folder = tmp_path / "read-only"
    folder.mkdir()
    os.chmod(folder, 0o500)
    try:
        with pytest.raises(PermissionError, match=r"cannot save the checkpoint .*model.npz"):
            save_checkpoint(folder / "model.npz", {"a": 1})
    finally:
        os.chmod(folder, 0o700)


def write_archive(path, entries, compression=zipfile.ZIP_STORED):
    """A zip of .npy entries: name -> array, or name -> raw bytes (written as given)."""
    import io

    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, value in entries.items():
            if isinstance(value, bytes):
                archive.writestr(name + ".npy", value)
                continue
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, value, allow_pickle=True)
            archive.writestr(name + ".npy", buffer.getvalue())


def manifest(state):
    blob = json.dumps({"format": serialization.FORMAT, "version": serialization.VERSION, "state": state})
    return np.frombuffer(blob.encode(), dtype=np.uint8)


def test_only_the_entries_the_state_names_are_read(tmp_path, monkeypatch):
    """An entry nothing refers to (here one claiming 4 GB from 4 kB) is never decompressed."""
    path = tmp_path / "model.npz"
    write_archive(path, {"__state__": manifest({"dict": [["w", {"array": "array_0"}]]}), "array_0": np.arange(3.0)})
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("unused.npy", os.urandom(4096))
    with open(path, "r+b") as stream:  # its central directory entry now claims 4 GB uncompressed
        data = bytearray(stream.read())
        start = data.rindex(b"unused.npy") - 46  # the entry's fixed 46-byte part precedes its name
        assert data[start : start + 4] == b"PK\x01\x02"
        data[start + 24 : start + 28] = (4_000_000_000).to_bytes(4, "little")
        stream.seek(0)
        stream.write(data)
    with zipfile.ZipFile(path) as archive:
        assert archive.getinfo("unused.npy").file_size == 4_000_000_000
    opened = []
    real_open = zipfile.ZipFile.open
    def recording_open(self, name, *args, **kwargs):
        opened.append(getattr(name, "filename", name))
        return real_open(self, name, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", recording_open)
    loaded = load_checkpoint(path)
    assert loaded["w"].tolist() == [0.0, 1.0, 2.0]
    assert sorted(opened) == ["__state__.npy", "array_0.npy"]


def test_a_named_entry_whose_sizes_disagree_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "model.npz"
    good = manifest({"dict": [["w", {"array": "array_0"}]]})
    import io

    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.zeros(1000))
    lying = buffer.getvalue().replace(b"(1000,)", b"(9000,)")  # the header claims 9 times the data
    write_archive(path, {"__state__": good, "array_0": lying})
    with pytest.raises(CheckpointError, match=r"entry 'array_0' declares \d+ bytes, its header .* implies"):
        load_checkpoint(path)


def test_an_entry_the_state_names_but_the_archive_lacks_is_refused(tmp_path):
    path = tmp_path / "model.npz"
    write_archive(path, {"__state__": manifest({"dict": [["w", {"array": "array_7"}]]})})
    with pytest.raises(CheckpointError, match="no entry 'array_7'"):
        load_checkpoint(path)


def test_a_corrupt_checkpoint_never_suggests_unpickling(tmp_path):
    path = tmp_path / "model.npz"
    objects = np.array([{"a": 1}, None], dtype=object)
    write_archive(path, {"__state__": manifest({"dict": [["w", {"array": "array_0"}]]}), "array_0": objects})
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path)
    assert "Python objects" in str(caught.value) and "pickle" not in str(caught.value).lower()
    write_archive(path, {"__state__": objects})
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path)
    assert "pickle" not in str(caught.value).lower()


def test_deeply_nested_json_raises_checkpoint_error(tmp_path):
    path = tmp_path / "deep.npz"
    state = "[" * 5000 + "]" * 5000
    blob = f'{{"format": "{serialization.FORMAT}", "version": 1, "state": {state}}}'
    write_archive(path, {"__state__": np.frombuffer(blob.encode(), dtype=np.uint8)})
    with pytest.raises(CheckpointError, match="nested too deeply"):
        load_checkpoint(path)


def test_saving_a_state_nested_too_deeply_raises_value_error(tmp_path):
    state = []
    for _ in range(5000):
        state = [state]
    with pytest.raises(ValueError, match="nested this deeply"):
        save_checkpoint(tmp_path / "deep.npz", state)
    assert os.listdir(tmp_path) == []


def test_a_named_entry_claiming_more_than_deflate_can_expand_is_refused_unread(tmp_path):
    path = tmp_path / "model.npz"
    write_archive(path, {"__state__": manifest({"dict": [["w", {"array": "array_0"}]]})})
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("array_0.npy", os.urandom(4096))
    with open(path, "r+b") as stream:
        data = bytearray(stream.read())
        start = data.rindex(b"array_0.npy") - 46
        data[start + 24 : start + 28] = (4_000_000_000).to_bytes(4, "little")
        stream.seek(0)
        stream.write(data)
    with pytest.raises(CheckpointError, match=r"entry 'array_0' declares 4000000000 bytes from \d+ compressed"):
        load_checkpoint(path)
