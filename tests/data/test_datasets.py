import numpy as np
import pytest

from needle.data import Dataset, NDArrayDataset


def test_base_dataset_methods_must_be_overridden():
    dataset = Dataset()
    with pytest.raises(NotImplementedError, match="__getitem__"):
        dataset[0]
    with pytest.raises(NotImplementedError, match="__len__"):
        len(dataset)
    assert dataset.as_arrays() is None
    assert Dataset.supports_array_index is False


def test_apply_transforms_runs_in_order():
    dataset = Dataset(transforms=[lambda x: x + 1, lambda x: x * 10])
    assert dataset.apply_transforms(np.array(2)) == 30  # (2 + 1) * 10, not 2 * 10 + 1
    assert Dataset().apply_transforms("unchanged") == "unchanged"


def test_ndarray_dataset_indexing():
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.arange(6, dtype=np.uint8) * 2
    dataset = NDArrayDataset(x, y)
    assert len(dataset) == 6
    sample_x, sample_y = dataset[4]
    np.testing.assert_array_equal(sample_x, [8, 9])
    assert sample_y == 8
    batch_x, batch_y = dataset[np.array([5, 0, 5])]
    np.testing.assert_array_equal(batch_x, x[[5, 0, 5]])
    np.testing.assert_array_equal(batch_y, [10, 0, 10])
    sliced = dataset[1:3]
    np.testing.assert_array_equal(sliced[0], x[1:3])
    assert dataset.as_arrays()[0] is x


def test_ndarray_dataset_single_array_and_lists():
    dataset = NDArrayDataset([[1, 2], [3, 4]])
    assert len(dataset) == 2
    (row,) = dataset[1]
    np.testing.assert_array_equal(row, [3, 4])


def test_ndarray_dataset_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one array"):
        NDArrayDataset()
    with pytest.raises(ValueError, match=r"\[3, 2\]"):
        NDArrayDataset(np.zeros(3), np.zeros(2))
