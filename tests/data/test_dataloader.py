import numpy as np
import pytest

import needle as ndl
from needle.data import DataLoader, Dataset, MNISTDataset, NDArrayDataset, RandomFlipHorizontal


def arange_dataset(count=10):
    """x[i] = [i, i + 0.5] (float64 on purpose), y[i] = i (int64)."""
    x = np.stack([np.arange(count), np.arange(count) + 0.5], axis=1).astype(np.float64)
    return NDArrayDataset(x, np.arange(count))


class IntOnlyDataset(Dataset):
    """A dataset whose __getitem__ takes Python ints only."""

    def __init__(self, count):
        super().__init__()
        self.count, self.calls = count, 0

    def __len__(self):
        return self.count

    def __getitem__(self, index):
        assert isinstance(index, int), f"got {type(index)}"
        self.calls += 1
        return np.full((2, 2), index, dtype=np.float32), np.int32(index)


class CountingArrayDataset(NDArrayDataset):
    """Vectorised indexing without whole arrays: counts calls to __getitem__."""

    calls = 0

    def __getitem__(self, index):
        self.calls += 1
        return super().__getitem__(index)

    def as_arrays(self):
        return None


def labels_of(loader):
    return np.concatenate([batch[1].numpy() for batch in loader])


def test_batches_equal_dataset_slices():
    dataset = arange_dataset(10)
    loader = DataLoader(dataset, batch_size=4)
    assert len(loader) == 3
    batches = list(loader)
    assert [b[0].shape for b in batches] == [(4, 2), (4, 2), (2, 2)]
    for number, (x, y) in enumerate(batches):
        truth_x, truth_y = dataset[number * 4 : number * 4 + 4]
        np.testing.assert_array_equal(x.numpy(), truth_x)
        np.testing.assert_array_equal(y.numpy(), truth_y)


def test_tensors_dtypes_and_requires_grad():
    x, y = next(iter(DataLoader(arange_dataset(), batch_size=3)))
    assert isinstance(x, ndl.Tensor) and isinstance(y, ndl.Tensor)
    assert x.requires_grad is False and y.requires_grad is False
    assert x.numpy().dtype == np.float32  # float64 data becomes float32
    assert y.numpy().dtype == np.int64  # integer labels keep their dtype
    assert x.device == ndl.default_device()


def test_drop_last():
    loader = DataLoader(arange_dataset(10), batch_size=4, drop_last=True)
    assert len(loader) == 2
    assert [b[0].shape[0] for b in loader] == [4, 4]
    assert len(DataLoader(arange_dataset(8), batch_size=4, drop_last=True)) == 2
    assert len(DataLoader(arange_dataset(9), batch_size=4)) == 3


def test_shuffle_is_a_new_permutation_each_epoch():
    loader = DataLoader(arange_dataset(50), batch_size=7, shuffle=True)
    np.random.seed(0)
    first, second = labels_of(loader), labels_of(loader)
    np.testing.assert_array_equal(np.sort(first), np.arange(50))  # every sample exactly once
    np.testing.assert_array_equal(np.sort(second), np.arange(50))
    assert not np.array_equal(first, second)
    np.random.seed(0)
    np.testing.assert_array_equal(first, np.random.permutation(50))  # course's draw


def test_permutation_is_drawn_when_iteration_starts():
    loader = DataLoader(arange_dataset(20), batch_size=20, shuffle=True)
    np.random.seed(5)
    expected = np.random.permutation(20)
    np.random.seed(5)
    iterator = iter(loader)
    np.random.seed(6)  # must not affect the epoch already started
    np.testing.assert_array_equal(next(iterator)[1].numpy(), expected)


def test_shuffled_batches_pair_inputs_with_their_labels():
    np.random.seed(1)
    batches = list(DataLoader(arange_dataset(30), batch_size=8, shuffle=True))
    assert [len(y.numpy()) for _, y in batches] == [8, 8, 8, 6]
    labels = np.concatenate([y.numpy() for _, y in batches])
    np.random.seed(1)
    np.testing.assert_array_equal(labels, np.random.permutation(30))  # the seeded order, not 0..29
    assert not np.array_equal(labels, np.arange(30))
    for x, y in batches:
        np.testing.assert_array_equal(x.numpy(), np.stack([y.numpy(), y.numpy() + 0.5], axis=1))


def test_int_only_dataset_is_fetched_per_sample():
    dataset = IntOnlyDataset(5)
    batches = list(DataLoader(dataset, batch_size=2))
    assert dataset.calls == 5
    x, y = batches[2]
    assert x.shape == (1, 2, 2)
    np.testing.assert_array_equal(batches[1][1].numpy(), [2, 3])
    assert batches[1][1].numpy().dtype == np.int32
    np.random.seed(0)
    assert sorted(labels_of(DataLoader(dataset, batch_size=2, shuffle=True))) == [0, 1, 2, 3, 4]


def test_array_indexable_dataset_is_fetched_once_per_batch():
    dataset = CountingArrayDataset(np.arange(12, dtype=np.float32), np.arange(12))
    batches = list(DataLoader(dataset, batch_size=5, shuffle=True))
    assert dataset.calls == 3 == len(batches)


def test_single_array_dataset_gives_one_tensor_tuples():
    (batch,) = next(iter(DataLoader(NDArrayDataset(np.ones((4, 3), np.float32)), batch_size=4)))
    np.testing.assert_array_equal(batch.numpy(), np.ones((4, 3)))


def test_mnist_batches(mnist_paths, test_set):
    loader = DataLoader(test_set, batch_size=64)
    assert len(loader) == 157
    x, y = next(iter(loader))
    assert x.shape == (64, 784) and x.numpy().dtype == np.float32
    assert y.numpy().dtype == np.uint8
    np.testing.assert_array_equal(x.numpy(), test_set[0:64][0])
    np.testing.assert_array_equal(y.numpy()[:3], [7, 2, 1])


def test_mnist_with_transforms(mnist_paths):
    flipped = MNISTDataset(mnist_paths.test_images, mnist_paths.test_labels, [RandomFlipHorizontal(p=1.0)])
    x, _ = next(iter(DataLoader(flipped, batch_size=3)))
    expected = flipped.images[:3].reshape(3, 28, 28, 1)[:, :, ::-1, :]
    np.testing.assert_array_equal(x.numpy(), expected.reshape(3, 784))  # flipped as images, flattened back
    images = MNISTDataset(mnist_paths.test_images, mnist_paths.test_labels, [RandomFlipHorizontal(p=1.0)], flat=False)
    x, _ = next(iter(DataLoader(images, batch_size=3)))
    np.testing.assert_array_equal(x.numpy(), expected)


def test_bad_arguments():
    dataset = arange_dataset()
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="batch_size"):
            DataLoader(dataset, batch_size=bad)
    with pytest.raises(ValueError, match="dtype"):
        DataLoader(dataset, dtype="int32")
    with pytest.raises(ValueError, match="device"):
        DataLoader(dataset, device="tpu")


@pytest.mark.skipif(ndl.cuda().enabled(), reason="checks the error on machines without a GPU")
def test_unavailable_device_is_reported():
    with pytest.raises(RuntimeError, match="device=needle.cpu"):
        DataLoader(arange_dataset(), device=ndl.cuda())


@pytest.mark.skipif(not ndl.cuda().enabled(), reason="needs CuPy and a GPU")
def test_cuda_batches_index_device_resident_arrays(test_set):
    device = ndl.cuda()
    loader = DataLoader(test_set, batch_size=100, shuffle=True, device=device)
    np.random.seed(0)
    labels = []
    for x, y in loader:
        assert x.device == device and y.device == device
        labels.append(y.numpy())
    resident = loader._resident[1]
    assert all(isinstance(array, device.xp.ndarray) for array in resident)
    list(loader)
    assert loader._resident[1] is resident  # placed on the device once
    np.random.seed(0)
    np.testing.assert_array_equal(np.concatenate(labels), test_set.labels[np.random.permutation(10000)])
