"""Datasets: the course's ``Dataset`` base class and ``NDArrayDataset``.

A dataset maps an index to a tuple of samples (for example ``(image, label)``).
Datasets whose ``__getitem__`` also accepts a slice or an integer index array
set ``supports_array_index = True``; the ``DataLoader`` then fetches a whole
batch with one vectorised call instead of one call per sample.
"""

import numpy as np


class Dataset:
    """Base class: subclasses implement ``__getitem__`` and ``__len__``.

    Args:
        transforms: optional list of callables applied in order to a sample by
            ``apply_transforms``.

    Example:
        >>> class Squares(Dataset):
        ...     def __len__(self):
        ...         return 4
        ...     def __getitem__(self, index):
        ...         return (self.apply_transforms(np.array([index * index])),)
        >>> Squares(transforms=[lambda x: x + 1])[3]
        (array([10]),)
    """

    # NOTE: False by default so a user subclass that only handles ints still works;
    # set True when __getitem__ handles slices and integer arrays vectorised.
    supports_array_index = False

    def __init__(self, transforms=None):
        self.transforms = transforms

    def __getitem__(self, index):
        raise NotImplementedError(
            f"{type(self).__name__} must define __getitem__(self, index) returning a tuple of samples"
        )

    def __len__(self):
        raise NotImplementedError(
            f"{type(self).__name__} must define __len__(self) returning the number of samples"
        )

    def apply_transforms(self, x):
        """Return ``x`` after every transform in ``self.transforms``, in order."""
        if self.transforms is not None:
            for transform in self.transforms:
                x = transform(x)
        return x

    def as_arrays(self):
        """Whole-dataset arrays ``A`` with ``self[i] == tuple(a[i] for a in A)``, or None.

        The ``DataLoader`` uses them to keep the data on the device once and index
        batches there. The base class returns None (no such arrays known).
        """
        return None


class NDArrayDataset(Dataset):
    """A dataset over arrays that share their first dimension.

    ``dataset[i]`` is ``tuple(a[i] for a in arrays)``; ``i`` may be an int, a
    slice, or an integer index array (vectorised batches).

    Args:
        *arrays: one or more numpy arrays (or array-likes) of equal length.

    Example:
        >>> x = np.arange(6, dtype=np.float32).reshape(3, 2)
        >>> y = np.array([0, 1, 0], dtype=np.uint8)
        >>> dataset = NDArrayDataset(x, y)
        >>> len(dataset)
        3
        >>> dataset[np.array([2, 0])]
        (array([[4., 5.],
               [0., 1.]], dtype=float32), array([0, 0], dtype=uint8))
    """

    supports_array_index = True

    def __init__(self, *arrays):
        super().__init__()
        if not arrays:
            raise ValueError("NDArrayDataset needs at least one array, e.g. NDArrayDataset(X, y)")
        self.arrays = tuple(a if hasattr(a, "shape") else np.asarray(a) for a in arrays)
        lengths = [len(a) for a in self.arrays]
        if len(set(lengths)) != 1:
            raise ValueError(
                f"NDArrayDataset arrays must have the same length (first dimension); got {lengths}"
            )

    def __len__(self):
        return len(self.arrays[0])

    def __getitem__(self, index):
        return tuple(a[index] for a in self.arrays)

    def as_arrays(self):
        """The arrays themselves (see ``Dataset.as_arrays``)."""
        return self.arrays
