"""The benchmark's workload: MNIST, the MLP's hyperparameters and its initial weights.

Every implementation starts each repeat from the same weights, drawn once here with numpy.
"""
import dataclasses
import gzip
import os

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_DIR = os.path.join(REPO_ROOT, "data")
EVAL_BATCH_SIZE = 1000
MOMENTUM = 0.9


@dataclasses.dataclass
class Workload:
    """One configuration: data (numpy, float32 images in [0, 1], uint8 labels) and hyperparameters."""

    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    hidden: int
    batch_size: int
    epochs: int
    lr: float
    device: str
    momentum: float = MOMENTUM
    seed: int = 0

    def initial_weights(self):
        """(W1, b1, W2, b2) as float32 numpy arrays, W of shape (in, out), b of shape (1, out).

        Drawn like the course's ``nn.Linear``: Kaiming-uniform for ReLU, bound
        sqrt(2) * sqrt(3 / fan_in), with the bias drawn as a (out, 1) weight and reshaped.
        """
        rng = np.random.default_rng(self.seed)
        in_features = self.train_images.shape[1]

        def kaiming_uniform(fan_in, fan_out):
            bound = np.sqrt(2.0) * np.sqrt(3.0 / fan_in)
            return rng.uniform(-bound, bound, size=(fan_in, fan_out)).astype(np.float32)

        w1 = kaiming_uniform(in_features, self.hidden)
        b1 = kaiming_uniform(self.hidden, 1).reshape(1, self.hidden)
        w2 = kaiming_uniform(self.hidden, 10)
        b2 = kaiming_uniform(10, 1).reshape(1, 10)
        return w1, b1, w2, b2


def _read_idx(path):
    """The array stored in a (gzipped) IDX file: uint8 images (N, rows*cols) or labels (N,)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as handle:
        raw = handle.read()
    magic = int.from_bytes(raw[0:4], "big")
    count = int.from_bytes(raw[4:8], "big")
    if magic == 2049:
        return np.frombuffer(raw, dtype=np.uint8, offset=8, count=count)
    if magic == 2051:
        rows = int.from_bytes(raw[8:12], "big")
        cols = int.from_bytes(raw[12:16], "big")
        return np.frombuffer(raw, dtype=np.uint8, offset=16, count=count * rows * cols).reshape(count, rows * cols)
    raise ValueError(f"{path} is not an IDX image or label file (magic number {magic})")


def _local_parse_mnist(image_file, label_file):
    images = _read_idx(image_file).astype(np.float32) / np.float32(255.0)
    return images, _read_idx(label_file).copy()


def load_mnist():
    """((train_images, train_labels), (test_images, test_labels), loader_name).

    Uses ``needle.data.parse_mnist`` and ``needle.data.mnist()`` when they exist, else a small IDX
    reader here; ``loader_name`` says which ran.
    """
    files = {
        "train_images": os.path.join(DATA_DIR, "train-images-idx3-ubyte.gz"),
        "train_labels": os.path.join(DATA_DIR, "train-labels-idx1-ubyte.gz"),
        "test_images": os.path.join(DATA_DIR, "t10k-images-idx3-ubyte.gz"),
        "test_labels": os.path.join(DATA_DIR, "t10k-labels-idx1-ubyte.gz"),
    }
    parse, loader_name = _local_parse_mnist, "benchmarks/workload.py IDX reader"
    try:
        import needle.data

        parse, loader_name = needle.data.parse_mnist, "needle.data.parse_mnist"
        paths = needle.data.mnist(root=DATA_DIR, download=False)
        files = {name: str(getattr(paths, name)) for name in files}
    except (ImportError, AttributeError, FileNotFoundError):
        pass
    train = parse(files["train_images"], files["train_labels"])
    test = parse(files["test_images"], files["test_labels"])
    train = (np.ascontiguousarray(train[0], dtype=np.float32), np.asarray(train[1]))
    test = (np.ascontiguousarray(test[0], dtype=np.float32), np.asarray(test[1]))
    return train, test, loader_name


class ShuffledIndexBatches:
    """Training loops for an implementation that steps on batches of shuffled row indices.

    The class defines ``_epoch_order()`` (a permutation of the training rows, on its device),
    ``_step(indices)`` and ``workload``.
    """

    def train_epoch(self):
        order = self._epoch_order()
        batch_size = self.workload.batch_size
        for start in range(0, order.shape[0], batch_size):
            self._step(order[start : start + batch_size])

    def train_steps(self, steps):
        """A few steps, for warm-up."""
        order = self._epoch_order()
        batch_size = self.workload.batch_size
        for step in range(steps):
            self._step(order[step * batch_size : (step + 1) * batch_size])
