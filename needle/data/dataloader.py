"""``DataLoader``: batches of ``needle.Tensor`` from a dataset (course semantics).

Fast paths, in order of preference:
  1. the dataset exposes whole arrays (``as_arrays()``, e.g. ``NDArrayDataset``,
     ``MNISTDataset`` without transforms): they are placed on the device once,
     at the first iteration, and each batch is an index into them (a view when
     not shuffling on CPU; no host-to-device copy per step on CUDA);
  2. the dataset takes slices/index arrays (``supports_array_index``): one
     vectorised ``dataset[index]`` call per batch;
  3. otherwise one ``dataset[i]`` call per sample, stacked with ``np.stack``.

A ``collate_fn`` (PyTorch's meaning: called on the list of samples of a batch)
always takes path 3, with the user's function doing the stacking.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np

from ..autograd import Tensor
from ..backend_ndarray import NDArray


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
        collate_fn: as in PyTorch, called with the list of ``dataset[i]`` samples of each batch;
            whatever it returns is the batch, as is (build ``needle.Tensor`` objects in it, or
            arrays, as your loop expects). None stacks each field into a Tensor on ``device``.
        num_workers, pin_memory, persistent_workers: accepted for PyTorch code at their
            defaults (0, False, False), which is what needle does: batches are made in the
            main process from data already in memory (array datasets are placed on the device
            once and indexed there), so worker processes and pinned staging memory have
            nothing to speed up. Other values raise ``ValueError`` saying so.

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
        >>> pairs = DataLoader(dataset, batch_size=2, collate_fn=lambda samples: samples)
        >>> [(x.tolist(), int(y)) for x, y in next(iter(pairs))]
        [([0.0, 1.0], 0), ([2.0, 3.0], 1)]
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        device: Any = None,
        dtype: Any = "float32",
        collate_fn: Callable[[list], Any] | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
    ) -> None:
        _refuse_worker_options(num_workers, pin_memory, persistent_workers)
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(
                f"DataLoader collate_fn must be callable (it gets the list of samples of a batch); "
                f"got collate_fn={collate_fn!r}"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"DataLoader batch_size must be a positive int; got batch_size={batch_size!r}")
        self.dtype = np.dtype(dtype)
        if self.dtype.kind != "f":
            raise ValueError(
                f"DataLoader dtype is the dtype for float data and must be floating; got dtype={dtype!r} "
                f"(integer labels keep their own dtype)"
            )
        if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
            raise TypeError(
                f"DataLoader dataset must be a Dataset (anything with __len__ and __getitem__, e.g. "
                f"NDArrayDataset(X, y)); got dataset={dataset!r}"
            )
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.device = None if device is None else _resolve_device(device)
        self.collate_fn = collate_fn
        self._resident = None  # (device, arrays) placed on the device at the first iteration
        self._epoch = _EpochState(None, 0)  # the epoch most recently started by iter()
        self._resume = None  # an _EpochState the next iter() continues (set by load_state_dict)

    def __len__(self) -> int:
        count = len(self.dataset)
        if self.drop_last:
            return count // self.batch_size
        return -(-count // self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        device = self.device if self.device is not None else _resolve_device(None)
        if self._resume is not None:
            epoch, self._resume = self._resume, None
        else:
            epoch = _EpochState(np.random.permutation(len(self.dataset)) if self.shuffle else None, 0)
        self._epoch = epoch
        return self._batches(device, epoch)

    # ---- resuming an epoch ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where the epoch most recently started by ``iter()`` stands: its sample order and the
        number of batches it has yielded (``next_batch``), plus the settings that order fits.

        ``load_state_dict`` of it makes the next ``iter()`` continue that epoch exactly.

        Example:
            >>> import numpy as np
            >>> from needle.data import NDArrayDataset
            >>> loader = DataLoader(NDArrayDataset(np.arange(6.0)), batch_size=2, shuffle=True)
            >>> batches = iter(loader)
            >>> first = next(batches)
            >>> state = loader.state_dict()
            >>> state["next_batch"]
            1
            >>> loader.load_state_dict(state)
            >>> rest = [x.numpy().tolist() for (x,) in loader]
            >>> rest == [x.numpy().tolist() for (x,) in batches]
            True
        """
        order = self._epoch.order
        return {
            "order": None if order is None else np.array(order, dtype=np.int64),
            "next_batch": self._epoch.next_batch,
            "samples": len(self.dataset),
            "batch_size": self.batch_size,
            "drop_last": bool(self.drop_last),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Make the next ``iter()`` continue the epoch that ``state_dict()`` described: the same
        order, from batch ``state["next_batch"]``. Later iterations draw new orders as usual.

        Raises:
            TypeError/ValueError: ``state`` does not fit this loader (another dataset length,
                batch size or ``drop_last``, or an order that is not a permutation of the
                samples); the loader is unchanged.
        """
        if not isinstance(state, dict):
            raise TypeError(
                f"DataLoader.load_state_dict needs the dict that state_dict() returned; got {type(state).__name__}"
            )
        problems = []
        settings = (("samples", len(self.dataset)), ("batch_size", self.batch_size), ("drop_last", bool(self.drop_last)))
        for key, mine in settings:
            if state.get(key) != mine:
                problems.append(f"{key}={state.get(key)!r} in the state, {mine!r} in this loader")
        next_batch = state.get("next_batch")
        is_int = isinstance(next_batch, (int, np.integer)) and not isinstance(next_batch, bool)
        if not is_int or not 0 <= next_batch <= len(self):
            problems.append(f"next_batch must be an int in [0, {len(self)}], got {next_batch!r}")
        order = state.get("order")
        if order is not None:
            order = np.asarray(order)
            count = len(self.dataset)
            if (
                order.shape != (count,)
                or order.dtype.kind not in "iu"
                or not np.array_equal(np.sort(order), np.arange(count))
            ):
                problems.append(f"order must be a permutation of the {count} sample indices")
        if problems:
            raise ValueError(
                "DataLoader.load_state_dict: the state does not fit this loader, nothing was loaded:\n  "
                + "\n  ".join(problems)
                + "\n(resume with a DataLoader over the same dataset, batch_size and drop_last)"
            )
        self._resume = _EpochState(None if order is None else order.astype(np.int64), int(next_batch))

    def _batches(self, device, epoch):
        """Yield each batch of the epoch from ``epoch.next_batch`` on, as a tuple of Tensors."""
        count, batch_count = len(self.dataset), len(self)
        order = epoch.order
        make_leaf, wrap = Tensor.make_const, NDArray.wrap
        resident = None if self.collate_fn is not None else self._resident_arrays(device)
        if resident is not None and order is not None and device.name != "cpu":
            order = device.array(order)  # one small index upload per epoch
        for batch in range(epoch.next_batch, batch_count):
            epoch.next_batch = batch + 1
            start = batch * self.batch_size
            stop = min(start + self.batch_size, count)
            index = slice(start, stop) if order is None else order[start:stop]
            if self.collate_fn is not None:
                yield self.collate_fn(self._samples(index))
                continue
            if resident is not None:
                # NOTE: the common case, kept to one comprehension: it runs once per training step.
                # Each batch array becomes a leaf directly, as _to_tensor makes it, one call shorter.
                yield tuple([make_leaf(wrap(array[index], device)) for array in resident])
                continue
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

    def _samples(self, index):
        """The batch's samples as ``dataset[i]`` returns them, for ``collate_fn``."""
        indices = range(index.start, index.stop) if isinstance(index, slice) else index
        return [self.dataset[int(i)] for i in indices]

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


class _EpochState:
    """One epoch's sample order (None: dataset order) and the index of its next batch."""

    __slots__ = ("order", "next_batch")

    def __init__(self, order, next_batch):
        self.order = order
        self.next_batch = next_batch


def _refuse_worker_options(num_workers, pin_memory, persistent_workers):
    """Accept PyTorch's loader options at needle's behaviour; refuse the rest, saying why."""
    if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < 0:
        raise ValueError(f"DataLoader num_workers must be a non-negative int; got num_workers={num_workers!r}")
    if num_workers:
        raise ValueError(
            f"DataLoader num_workers={num_workers}: needle makes batches in the main process only. "
            f"The data is already in memory (array datasets are put on the device once and each "
            f"batch is an index into them), so worker processes would only add copies. "
            f"Fix: drop num_workers (or pass num_workers=0)."
        )
    if pin_memory:
        raise ValueError(
            "DataLoader pin_memory=True: needle has no pinned staging memory. Array datasets are "
            "copied to the device once, at the first iteration, not once per batch, so there is no "
            "per-batch host-to-device copy to speed up. Fix: drop pin_memory (or pass pin_memory=False)."
        )
    if persistent_workers:
        raise ValueError(
            "DataLoader persistent_workers=True: needle uses no worker processes (see num_workers), "
            "so there are none to keep alive between epochs. Fix: drop persistent_workers."
        )


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
    # NOTE: a leaf made directly: the array is already a numeric array of ``device`` (cast by
    # the loader), so the constructor's checks and conversions would find nothing to do.
    return Tensor.make_const(NDArray.wrap(array, device))
