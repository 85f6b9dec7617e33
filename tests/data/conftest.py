"""Fixtures for needle.data tests: no network, real MNIST, small fake IDX files."""

import gzip
import struct
import urllib.request

import numpy as np
import pytest

from needle.data import MNISTDataset, mnist


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Fail loudly if any test reaches for the network."""

    def refuse(url, *args, **kwargs):
        raise AssertionError(f"a test tried to reach the network: {url}")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


@pytest.fixture(scope="session")
def mnist_paths():
    """The real MNIST files (the copy shipped in the package, needle/_data/mnist)."""
    return mnist(download=False)


@pytest.fixture(scope="session")
def train_set(mnist_paths):
    return MNISTDataset(mnist_paths.train_images, mnist_paths.train_labels)


@pytest.fixture(scope="session")
def test_set(mnist_paths):
    return MNISTDataset(mnist_paths.test_images, mnist_paths.test_labels)


def idx_bytes(magic, dims, payload):
    """Uncompressed IDX bytes: big-endian magic, dims, then the payload."""
    return struct.pack(">I" + "I" * len(dims), magic, *dims) + bytes(payload)


@pytest.fixture
def write_idx(tmp_path):
    """write_idx(name, magic, dims, payload, compress=True) -> path of a fake IDX file."""

    def write(name, magic, dims, payload, compress=True):
        data = idx_bytes(magic, dims, payload)
        path = tmp_path / name
        path.write_bytes(gzip.compress(data) if compress else data)
        return path

    return write


@pytest.fixture
def fake_pair(write_idx):
    """Three valid 28x28 images (pixel values 0..255 cycling) with labels 7, 3, 9."""
    pixels = np.arange(3 * 784) % 256
    images = write_idx("images.gz", 2051, (3, 28, 28), pixels.astype(np.uint8).tobytes())
    labels = write_idx("labels.gz", 2049, (3,), bytes([7, 3, 9]))
    return images, labels, pixels
