"""CIFAR10Dataset on small files written in the real format, and the restricted unpickler refusing crafted ones."""
import io
import os
import pickle
import pickletools
import struct

import numpy as np
import pytest

import needle as ndl
from needle.data import CIFAR10Dataset, DataLoader
from needle.data.datasets.cifar10_dataset import CIFAR10FormatError, load_batch
from needle.data.transforms import RandomFlipHorizontal

IMAGES_PER_FILE = 4


class Python2StylePickler(pickle._Pickler):
    """Writes bytes as Python 2 ``str`` opcodes, as the real files (made by Python 2's cPickle) hold them."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_python2_str(self, obj):
        size = len(obj)
        if size < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([size]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", size) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_python2_str


def real_format_batch(data, labels, name):
    """A batch file's bytes as in cifar-10-batches-py: Python 2 str keys, numpy.core globals."""
    batch = {
        b"batch_label": name.encode(),
        b"labels": [int(label) for label in labels],
        b"data": data,
        b"filenames": [f"image_{i}.png".encode() for i in range(len(labels))],
    }
    stream = io.BytesIO()
    Python2StylePickler(stream, protocol=2).dump(batch)
    return stream.getvalue().replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")


@pytest.fixture
def cifar_folder(tmp_path):
    """A cifar-10-batches-py folder of small batches; returns (folder, {file name: (data, labels)})."""
    rng = np.random.default_rng(10)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    contents = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, size=(IMAGES_PER_FILE, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, size=IMAGES_PER_FILE)
        (folder / name).write_bytes(real_format_batch(data, labels, name))
        contents[name] = (data, labels)
    return folder, contents


def test_generated_file_uses_only_the_real_formats_globals(cifar_folder):
    folder, _ = cifar_folder
    globals_named = {arg for op, arg, _ in pickletools.genops((folder / "test_batch").read_bytes()) if op.name == "GLOBAL"}
    assert globals_named == {"numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype"}


def test_train_and_test_sets_follow_the_course(cifar_folder):
    folder, contents = cifar_folder
    train = CIFAR10Dataset(str(folder), train=True)
    test = CIFAR10Dataset(str(folder), train=False)
    assert len(train) == 5 * IMAGES_PER_FILE and len(test) == IMAGES_PER_FILE
    assert train.X.shape == (5 * IMAGES_PER_FILE, 3, 32, 32) and train.X.dtype == np.float32
    expected = np.concatenate([contents[f"data_batch_{i}"][0] for i in range(1, 6)]).reshape(-1, 3, 32, 32) / 255.0
    np.testing.assert_allclose(train.X, expected, rtol=1e-6)
    assert 0.0 <= train.X.min() and train.X.max() <= 1.0
    np.testing.assert_array_equal(train.y, np.concatenate([contents[f"data_batch_{i}"][1] for i in range(1, 6)]))
    image, label = test[2]
    assert image.shape == (3, 32, 32)
    np.testing.assert_allclose(image, contents["test_batch"][0][2].reshape(3, 32, 32) / 255.0, rtol=1e-6)
    assert label == contents["test_batch"][1][2]
    images, labels = test[np.array([3, 0])]
    assert images.shape == (2, 3, 32, 32) and labels.tolist() == [contents["test_batch"][1][3], contents["test_batch"][1][0]]


def test_transforms_see_height_width_channels(cifar_folder):
    folder, _ = cifar_folder
    seen = []

    def record(image):
        seen.append(image.shape)
        return image

    flipped = CIFAR10Dataset(str(folder), train=False, transforms=[record, RandomFlipHorizontal(p=1.0)])
    plain = CIFAR10Dataset(str(folder), train=False)
    image, _ = flipped[1]
    assert seen == [(32, 32, 3)] and image.shape == (3, 32, 32)
    np.testing.assert_array_equal(image, plain[1][0][:, :, ::-1])
    assert flipped[0:2][0].shape == (2, 3, 32, 32)


def test_dataloader_batches_cifar(cifar_folder):
    folder, _ = cifar_folder
    loader = DataLoader(CIFAR10Dataset(str(folder), train=True), batch_size=8, device=ndl.cpu())
    images, labels = next(iter(loader))
    assert images.shape == (8, 3, 32, 32) and images.dtype == np.float32 and labels.shape == (8,)


def test_files_written_by_python3_pickle_load_too(tmp_path):
    data = np.arange(2 * 3072).astype(np.uint8).reshape(2, 3072)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        path = tmp_path / f"batch_{protocol}"
        path.write_bytes(pickle.dumps({"data": data, "labels": np.array([4, 9])}, protocol=protocol))
        loaded, labels = load_batch(str(path))
        np.testing.assert_array_equal(loaded, data)
        assert labels.tolist() == [4, 9]


class RunsCode:
    """Unpickling this calls ``exec``: what a malicious 'CIFAR' file would do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"__import__('pathlib').Path({self.marker!r}).write_text('pwned')",))


def test_a_pickle_that_runs_code_is_refused_before_running(cifar_folder, tmp_path):
    folder, _ = cifar_folder
    marker = tmp_path / "marker"
    data = np.zeros((IMAGES_PER_FILE, 3072), dtype=np.uint8)
    crafted = {b"data": data, b"labels": [0] * IMAGES_PER_FILE, b"batch_label": RunsCode(str(marker))}
    (folder / "test_batch").write_bytes(pickle.dumps(crafted, protocol=2))
    with pytest.raises(CIFAR10FormatError, match=r"test_batch: the file asks to load (__builtin__|builtins)\.exec.*refused"):
        CIFAR10Dataset(str(folder), train=False)
    assert not marker.exists(), "the crafted pickle ran code"
    # The same file really runs code under plain pickle: the test's payload is live.
    pickle.loads((folder / "test_batch").read_bytes())
    assert marker.read_text() == "pwned"


@pytest.mark.parametrize(
    "payload, pattern",
    [
        pytest.param({b"data": np.array([1, "x"], dtype=object), b"labels": [0]}, r"Python objects", id="object-array"),
        pytest.param({b"data": np.ma.masked_array(np.zeros((1, 3072), np.uint8)), b"labels": [0]}, r"numpy\.ma", id="subclass"),
        pytest.param({b"data": np.zeros((1, 3072), np.uint8)}, r"no \['labels'\] entry", id="no-labels"),
        pytest.param({b"data": np.zeros((1, 100), np.uint8), b"labels": [0]}, r"uint8 of shape \(N, 3072\)", id="wrong-shape"),
        pytest.param({b"data": np.zeros((1, 3072), np.uint8), b"labels": [10]}, r"ints in \[0, 10\)", id="bad-label"),
        pytest.param([1, 2], r"is a dict, this file holds a list", id="not-a-dict"),
    ],
)
def test_malformed_batches_are_refused_with_the_reason(tmp_path, payload, pattern):
    path = tmp_path / "test_batch"
    path.write_bytes(pickle.dumps(payload, protocol=2))
    with pytest.raises(CIFAR10FormatError, match=pattern):
        load_batch(str(path))


def test_truncated_file_is_named(tmp_path):
    path = tmp_path / "test_batch"
    path.write_bytes(real_format_batch(np.zeros((1, 3072), np.uint8), [0], "x")[:100])
    with pytest.raises(CIFAR10FormatError, match=r"test_batch: not a readable CIFAR-10 batch pickle"):
        load_batch(str(path))


def test_missing_files_name_the_expected_layout(cifar_folder):
    folder, _ = cifar_folder
    os.remove(folder / "data_batch_3")
    with pytest.raises(FileNotFoundError, match=r"\['data_batch_3'\] not found.*data_batch_1 \.\.\. data_batch_5 and test_batch"):
        CIFAR10Dataset(str(folder), train=True)
    with pytest.raises(FileNotFoundError, match=r"pass base_folder=.*cifar-10-batches-py"):
        CIFAR10Dataset(str(folder.parent), train=False)
