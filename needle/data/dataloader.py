"""``DataLoader``: batches of ``needle.Tensor`` from a dataset (course semantics).

Fast paths, in order of preference:
  1. the dataset exposes whole arrays (``as_arrays()``, e.g. ``NDArrayDataset``,
     ``MNISTDataset`` without transforms): they are placed on the device once,
     at the first iteration, and each batch is an index into them (a view when
     not shuffling on CPU; no host-to-device copy per step on CUDA);
  2. the dataset takes slices/index arrays (``supports_array_index``): one
     vectorised ``dataset[index]`` call per batch;
  3. otherwise one ``dataset[i]`` call per sample, stacked with ``np.stack``.
"""

import numpy as np


def _as_tuple(sample):
    """A dataset item as a tuple of arrays (a bare array becomes a 1-tuple)."""
    return sample if isinstance(sample, tuple) else (sample,)


class DataLoader:
    """Iterate over a dataset in batches of ``needle.Tensor`` (``requires_grad=False``).

    Each batch is a tuple with one Tensor per array the dataset returns. Float
    data is cast to ``dtype``; integer data (labels) keeps its dtype.

    Args:
        dataset: a ``needle.data.Dataset`` (anything with ``__len__`` and ``__getitem__``).
        batch_size: samples per batch (the last batch may be smaller).
        shuffle: draw a new ``np.random.permutation(len(dataset))`` at the start
            of every epoch (when ``iter(loader)`` is called).
        drop_last: drop the last batch if it is smaller than ``batch_size``.
        device: a needle device (or "cpu"/"cuda"); None means ``needle.default_device()``.
        dtype: dtype for floating-point arrays.

    Example:
        >>> import numpy as np
        >>> from needle.data import NDArrayDataset
        >>> dataset = NDArrayDataset(np.arange(10, dtype=np.float32).reshape(5, 2),
        ...                          np.arange(5, dtype=np.uint8))
        >>> loader = DataLoader(dataset, batch_size=2)
        >>> len(loader)
        3
        >>> x, y = next(iter(loader))
        >>> x.shape, y.numpy()
        ((2, 2), array([0, 1], dtype=uint8))
    """

    def __init__(self, dataset, batch_size=1, shuffle=False, drop_last=False, device=None, dtype="float32"):
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"DataLoader batch_size must be a positive int; got batch_size={batch_size!r}")
        self.dtype = np.dtype(dtype)
        if self.dtype.kind != "f":
            raise ValueError(
                f"DataLoader dtype is the dtype for float data and must be floating; got dtype={dtype!r} "
                f"(integer labels keep their own dtype)"
            )
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.device = None if device is None else _resolve_device(device)
        self._resident = None  # (device, arrays) placed on the device at the first iteration

    def __len__(self):
        count = len(self.dataset)
        if self.drop_last:
            return count // self.batch_size
        return -(-count // self.batch_size)

    def __iter__(self):
        device = self.device if self.device is not None else _resolve_device(None)
        order = np.random.permutation(len(self.dataset)) if self.shuffle else None
        return self._batches(device, order)

    def _batches(self, device, order):
        """Yield each batch of the epoch as a tuple of Tensors."""
        count, batch_count = len(self.dataset), len(self)
        resident = self._resident_arrays(device)
        if resident is not None and order is not None and device.name != "cpu":
            order = device.array(order)  # one small index upload per epoch
        for batch in range(batch_count):
            start = batch * self.batch_size
            stop = min(start + self.batch_size, count)
            index = slice(start, stop) if order is None else order[start:stop]
            if resident is not None:
                arrays = tuple(array[index] for array in resident)
            else:
                arrays = self._fetch(index)
                if device.name != "cpu":
                    arrays = tuple(device.array(array) for array in arrays)
            yield tuple(_to_tensor(array, device) for array in arrays)

    def _cast(self, array):
        """Host numpy array with float data cast to ``self.dtype`` (no copy if already so)."""
        array = np.asarray(array)
        if array.dtype.kind == "f" and array.dtype != self.dtype:
            array = array.astype(self.dtype)
        return array

    def _fetch(self, index):
        """Host arrays of one batch: one vectorised call, or one call per sample."""
        if getattr(self.dataset, "supports_array_index", False):
            return tuple(self._cast(array) for array in _as_tuple(self.dataset[index]))
        indices = range(index.start, index.stop) if isinstance(index, slice) else index
        samples = [_as_tuple(self.dataset[int(i)]) for i in indices]
        return tuple(self._cast(np.stack(column)) for column in zip(*samples))

    def _resident_arrays(self, device):
        """The dataset's whole arrays on ``device`` (cached), or None if it has none."""
        if self._resident is not None and self._resident[0] == device:
            return self._resident[1]
        as_arrays = getattr(self.dataset, "as_arrays", None)
        arrays = as_arrays() if as_arrays is not None else None
        if arrays is None:
            return None
        if device.name == "cpu":
            resident = tuple(_read_only(self._cast(array)) for array in arrays)
        else:
            resident = tuple(device.array(self._cast(array)) for array in arrays)
        self._resident = (device, resident)
        return resident


def _read_only(array):
    """A read-only view, so in-place edits of a batch cannot corrupt the dataset."""
    view = array.view()
    view.flags.writeable = False
    return view


def _resolve_device(device):
    """A needle device from None, a name ("cpu", "cuda", "cuda:0") or a device; raise if it is unavailable."""
    import needle

    device = needle.backend_ndarray.as_device(device)
    if not device.enabled():
        try:
            device.xp  # the device's own error says why (e.g. CuPy missing)
            reason = "it reports itself disabled"
        except RuntimeError as error:
            reason = str(error)
        raise RuntimeError(
            f"DataLoader device {device.name!r} is not available on this machine ({reason}); "
            f"pass device=needle.cpu() to load batches on the CPU"
        )
    return device


def _to_tensor(array, device):
    """A Tensor that wraps ``array`` (already on ``device``) without copying."""
    import needle

    return needle.Tensor(needle.NDArray(array, device=device), device=device, requires_grad=False)
