"""The course's NDArray internals, for code written against the homework that builds NDArray.

The course's NDArray is a flat buffer (``_handle``) read through ``_shape``, ``_strides`` and
``_offset``; its tests and students' code use those names, ``NDArray.make(shape, strides, device,
handle, offset)``, ``process_slice`` and ``flat``. needle's NDArray wraps one numpy or CuPy array
instead, and derives each of these from it, so both views agree at all times:

- ``_handle`` is the flat buffer the array's memory belongs to (shared by every view of it),
- ``_offset`` and ``_strides`` say where the array's elements sit in that buffer, in elements,
- writing through a view made with ``make(..., handle=x._handle)`` changes ``x``.

On CUDA, CuPy's ``as_strided`` makes views without a base array; needle remembers the buffer of
each strided view it makes (``NDArray.make``, the course's ``__getitem__``), so those report it
as on the CPU. Only a view made with CuPy's ``as_strided`` outside needle reports itself as the
start of its buffer.

Everything course-only lives here (see :mod:`needle.course_compat` for the whole map).

Example:
    >>> import numpy as np
    >>> from needle.backend_ndarray import NDArray
    >>> x = NDArray(np.arange(6, dtype="float32").reshape(2, 3))
    >>> row = x[1, :]
    >>> row._handle.ptr() == x._handle.ptr(), row._offset, row._strides
    (True, 3, (1,))
    >>> x.flat[4] += 10
    >>> x.numpy().tolist()
    [[0.0, 1.0, 2.0], [3.0, 14.0, 5.0]]
"""
import numbers
import operator

import numpy

from .device import Device, cpu, default_device, device_of, resolve_dtype
from .handles import Handle, check_view, data_pointer, remembered_base, strided_view


class CourseArrayInterface:
    """The course's NDArray names, mixed into :class:`~needle.backend_ndarray.NDArray`."""

    __slots__ = ()

    # ---- the layout, as the course names it ---------------------------------------------------
    @property
    def _shape(self) -> tuple:
        return self.shape

    @property
    def _strides(self) -> tuple:
        """Strides in elements."""
        return self.strides

    @property
    def _device(self) -> Device:
        return self.device

    @property
    def _handle(self) -> Handle:
        """The flat buffer holding this array's elements, the same for the array and all its views."""
        return self.device.Array.over(_flat_buffer(self.raw, self.device.xp))

    @property
    def _offset(self) -> int:
        """Where this array's first element sits in ``_handle``, in elements."""
        if self.raw.size == 0:
            return 0
        return (data_pointer(self.raw) - self._handle.ptr()) // self.raw.itemsize

    @staticmethod
    def compact_strides(shape) -> tuple:
        """The row-major strides (in elements) of a compact array of ``shape``."""
        strides, stride = [], 1
        for size in reversed(tuple(shape)):
            strides.append(stride)
            stride *= int(size)
        return tuple(reversed(strides))

    @classmethod
    def make(cls, shape, strides=None, device: Device = None, handle: Handle = None, offset: int = 0, *, dtype=None):
        """The course's constructor: an array of ``shape`` over ``handle`` (a fresh buffer when None).

        Args:
            shape: the array's shape.
            strides: its strides in elements (row-major when None).
            device: where it lives (default: the handle's device, else the CPU).
            handle: the flat buffer to view (``other._handle``); allocated when None.
            offset: where the first element sits in ``handle``, in elements.
            dtype: element type of a fresh buffer (float32, the course's, by default).

        Example:
            >>> from needle.backend_ndarray import NDArray
            >>> base = NDArray([1.0, 2.0, 3.0, 4.0])
            >>> NDArray.make((2,), strides=(2,), handle=base._handle, offset=1).numpy().tolist()
            [2.0, 4.0]
        """
        if device is None:
            device = default_device() if handle is None else device_of(handle.array)
        elif handle is not None and not isinstance(handle.array, device.xp.ndarray):
            raise ValueError(f"make(device={device!r}) was given a handle on {device_of(handle.array)!r}")
        shape = _int_shape(shape)
        size = _count(shape)
        if handle is None:
            handle = device.Array(size, dtype or "float32")
        elif dtype is not None and resolve_dtype(dtype) != handle.array.dtype:
            raise TypeError(f"make(dtype={dtype!r}) differs from the handle's dtype {handle.array.dtype}")
        if strides is None:
            strides = cls.compact_strides(shape)
        # NOTE: one O(ndim) check here; the arrays made from this view are then safe to use as they are.
        shape, strides, offset = check_view(shape, strides, offset, handle.size, "NDArray.make")
        if strides == cls.compact_strides(shape):
            raw = handle.array[offset : offset + size].reshape(shape)
        else:
            raw = strided_view(device.xp, handle, shape, strides, offset, "NDArray.make")
        return cls.wrap(raw, device)

    # ---- element access the course's way -----------------------------------------------------
    @property
    def flat(self) -> "FlatView":
        """The elements in row-major order as a writable 1-D sequence: ``x.flat[j] += eps`` changes ``x``."""
        return FlatView(self)

    def process_slice(self, sl: slice, dim: int) -> slice:
        """``sl`` with explicit start, stop and step for axis ``dim``, as the course's NDArray fills them in.

        Missing start is 0, missing stop the axis length, a negative start or stop counts from the
        end, missing step is 1: for slices within the axis, the course's result. A start or stop
        beyond the axis is clamped to it, as numpy's indexing does (``slice(0, 100)`` on an axis of
        5 is ``slice(0, 5, 1)``, the five elements ``x[0:100]`` gives), so the result always lies
        within the axis. Like the course's, it takes only non-empty slices with positive steps
        (ValueError otherwise); an axis ``dim`` outside ``-ndim .. ndim - 1`` raises IndexError.

        Example:
            >>> from needle.backend_ndarray import NDArray
            >>> row = NDArray([[1.0, 2.0, 3.0]])
            >>> row.process_slice(slice(None, -1), 1), row.process_slice(slice(1, 100), 1)
            (slice(0, 2, 1), slice(1, 3, 1))
        """
        if not isinstance(sl, slice):
            raise TypeError(f"process_slice takes a slice, got {type(sl).__name__} {sl!r}")
        ndim = len(self.shape)
        if not isinstance(dim, numbers.Integral) or isinstance(dim, bool):
            raise TypeError(f"process_slice: axis must be an int, got {type(dim).__name__} {dim!r}")
        if not -ndim <= dim < ndim:
            raise IndexError(f"process_slice: axis {dim} is out of bounds for an array of dimension {ndim} (ndim={ndim})")
        length = self.shape[dim]
        if sl.step is not None and sl.step <= 0:
            raise ValueError(
                f"process_slice takes slices with positive steps, as the course's NDArray does; got {sl} "
                "(index the array directly for other slices)"
            )
        start, stop, step = sl.indices(length)  # numpy's clamping
        if stop <= start:
            raise ValueError(
                f"process_slice takes non-empty slices with positive steps, as the course's NDArray does; "
                f"got {sl} on an axis of length {length} (index the array directly for other slices)"
            )
        return slice(start, stop, step)


class FlatView:
    """``x.flat``: the elements of ``x`` in row-major order, read and written in place.

    Integer indices give one element (a numpy scalar, as numpy's ``flat`` does); slices and
    index arrays give a copy as an NDArray. Assignment writes into ``x``.
    """

    __slots__ = ("_array",)

    def __init__(self, array):
        self._array = array

    def __len__(self) -> int:
        return self._array.size

    def __iter__(self):
        return iter(self._array.numpy().ravel())

    def __repr__(self):
        return f"FlatView(size={self._array.size}, device={self._array.device!r})"

    def _target(self, index):
        """The array to index and the index into it that reaches flat position(s) ``index``."""
        raw, size = self._array.raw, self._array.size
        if isinstance(index, numbers.Integral):
            if not -size <= index < size:
                raise IndexError(f"flat index {index} is out of bounds for an array of size {size}")
            index = int(index) % size
            if raw.flags.c_contiguous:
                return raw.reshape(-1), index
            return raw, numpy.unravel_index(index, raw.shape)
        if raw.flags.c_contiguous:
            return raw.reshape(-1), _host_index(index)
        positions = numpy.arange(size)[_host_index(index)]
        xp = self._array.device.xp
        return raw, tuple(xp.asarray(axis_index) for axis_index in numpy.unravel_index(positions, raw.shape))

    def __getitem__(self, index):
        target, where = self._target(index)
        value = target[where]
        if isinstance(index, numbers.Integral):
            return value if isinstance(value, numpy.generic) else self._array.dtype.type(value.item())
        return type(self._array)(value.copy(), device=self._array.device)

    def __setitem__(self, index, value):
        target, where = self._target(index)
        target[where] = value.raw if isinstance(value, CourseArrayInterface) else value


def cpu_numpy() -> Device:
    """The CPU device; the course's name for its numpy-backed device."""
    return cpu()


BackendDevice = Device
"""The course's name for the device class."""


def _host_index(index):
    return index.numpy() if isinstance(index, CourseArrayInterface) else index


def _flat_buffer(raw, xp):
    """The whole flat buffer ``raw``'s memory belongs to, as a 1-D array of ``raw``'s dtype."""
    root = _root(raw, xp)
    made_over = remembered_base(root)
    while made_over is not None:  # a CuPy strided view: the buffer it was made over, and its root
        root = _root(made_over, xp)
        made_over = remembered_base(root)
    if root.flags.c_contiguous:
        flat = root.reshape(-1)
    elif root.flags.f_contiguous:
        flat = root.T.reshape(-1)
    else:
        flat = _span(root, xp)
    if flat.dtype != raw.dtype:
        if flat.nbytes % raw.itemsize:
            return _span(raw, xp)
        flat = flat.view(raw.dtype)
    return flat


def _root(raw, xp):
    """The array at the end of ``raw``'s base chain (``raw`` itself when it has no base)."""
    root, node = raw, raw.base
    while node is not None:  # numpy's as_strided puts a non-array between a view and its base
        if isinstance(node, xp.ndarray):
            root = node
        node = getattr(node, "base", None)
    return root


def _span(raw, xp):
    """A 1-D array over the memory from ``raw``'s lowest to its highest element."""
    forward = raw[tuple(slice(None, None, -1) if s < 0 else slice(None) for s in raw.strides)]
    extent = sum((n - 1) * s for n, s in zip(forward.shape, forward.strides)) + raw.itemsize if raw.size else 0
    return xp.lib.stride_tricks.as_strided(forward, (extent // raw.itemsize,), (raw.itemsize,))


def _int_shape(shape) -> tuple:
    try:
        return tuple(operator.index(size) for size in shape)
    except TypeError:
        raise TypeError(f"NDArray.make: shape must be a tuple of integers, got {shape!r}") from None


def _count(shape) -> int:
    total = 1
    for size in shape:
        total *= size
    return total
