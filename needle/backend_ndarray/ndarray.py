"""NDArray: the course's array interface as a thin wrapper of one numpy or CuPy array.

Every method is one call into the device's array module; no per-element Python and no copy that
the operation itself does not need. Strides are reported in elements, as the course does. The
course's internals (``_handle``, ``_offset``, ``make``, ``flat``, ``process_slice``) come from
:mod:`needle.backend_ndarray.course_api`.
"""
import numpy

from .course_api import CourseArrayInterface
from .device import Device, as_device, device_of, resolve_dtype
from .handles import check_view, element_reach
from .products import matmul


class NDArray(CourseArrayInterface):
    """An n-dimensional array on a device.

    Args:
        other: an NDArray (shared, or moved to ``device``), a numpy/CuPy array, or nested lists.
        device: where the array lives; defaults to the other array's device, else ``cpu()``.
        dtype: element type; Python lists default to float32, arrays keep theirs.

    Example:
        >>> from needle.backend_ndarray import NDArray
        >>> a = NDArray([[1, 2], [3, 4]])
        >>> (a @ a).numpy().tolist()
        [[7.0, 10.0], [15.0, 22.0]]
        >>> a.strides, a.dtype
        ((2, 1), dtype('float32'))
    """

    __slots__ = ("raw", "device")
    __array_priority__ = 1000  # numpy defers mixed arithmetic to NDArray's operators

    def __init__(self, other, device=None, dtype=None):
        if device is not None and not isinstance(device, Device):
            device = as_device(device)  # a name: "cpu", "cuda"
        if isinstance(other, NDArray):
            device = device or other.device
            raw = other.raw if device is other.device else _move(other.raw, device)
        else:
            if device is None:
                device = device_of(other)
            raw = device.array(other, dtype=None)
        if dtype is not None:
            dtype = resolve_dtype(dtype)
            if raw.dtype != dtype:
                raw = raw.astype(dtype)
        self.raw = raw
        self.device = device

    @classmethod
    def wrap(cls, raw, device: Device) -> "NDArray":
        """Wrap ``raw`` (an array of ``device``'s module) without checks or copies.

        (The course's ``NDArray.make(shape, strides, device, handle, offset)`` is in
        :mod:`needle.backend_ndarray.course_api`.)
        """
        array = cls.__new__(cls)
        array.raw = raw
        array.device = device
        return array

    # ---- properties -----------------------------------------------------------------------
    @property
    def shape(self):
        return self.raw.shape

    @property
    def strides(self):
        """Strides in elements, not bytes."""
        itemsize = self.raw.itemsize
        return tuple(s // itemsize for s in self.raw.strides)

    @property
    def dtype(self):
        return self.raw.dtype

    @property
    def size(self):
        return self.raw.size

    @property
    def ndim(self):
        return self.raw.ndim

    @property
    def nbytes(self):
        return self.raw.nbytes

    def __len__(self):
        return len(self.raw)

    def __repr__(self):
        return f"NDArray({self._shown()!r}, device={self.device!r})"

    def __str__(self):
        return str(self._shown())

    def _shown(self):
        """What printing shows: the values; while ``ndl.compile`` captures, its traced array, which
        prints that its value is not known yet (a print in a compiled step runs at capture only)."""
        raw = self.raw
        if raw.__class__ is not numpy.ndarray and isinstance(raw, numpy.ndarray):
            return raw  # a numpy subclass prints itself (ndl.compile's traced array: "not known while capturing")
        return self.numpy()

    # ---- conversion -----------------------------------------------------------------------
    def numpy(self):
        """A numpy array with the same values (the array itself on CPU, a host copy on CUDA)."""
        raw = self.raw
        if raw.__class__ is numpy.ndarray:
            return raw
        # NOTE: CuPy arrays, and the numpy arrays ndl.compile traces, answer get(); other numpy subclasses are returned.
        return raw.get() if hasattr(raw, "get") else raw

    def __array__(self, dtype=None, copy=None):
        host = self.numpy()
        if dtype is not None and host.dtype != dtype:
            return host.astype(dtype)
        return host.copy() if copy else host

    def to(self, device):
        """This array on ``device`` (a Device or a name such as "cpu"; itself when already there)."""
        if not isinstance(device, Device):
            device = as_device(device)
        return self if device is self.device else NDArray.wrap(_move(self.raw, device), device)

    def astype(self, dtype, copy=True):
        return _wrap(self.raw.astype(resolve_dtype(dtype), copy=copy), self.device)

    def item(self):
        return self.raw.item()

    def __float__(self):
        return float(self.raw)

    def __int__(self):
        return int(self.raw)

    def tolist(self):
        return self.numpy().tolist()

    # ---- memory layout --------------------------------------------------------------------
    def is_compact(self):
        """True when the array is its whole buffer in row-major order, as the course defines it
        (a contiguous slice of a larger buffer is not compact: its ``_handle`` holds more)."""
        return self.raw.flags.c_contiguous and self.raw.size == self._handle.size

    def compact(self):
        """A compact version: itself when it already is, else a row-major copy in a buffer of its own."""
        if self.is_compact():
            return self
        # NOTE: the method, not xp.array(raw): numpy.array makes a plain copy that an ndl.compile
        # trace does not see, so the copy would be frozen into the replay.
        return NDArray.wrap(self.raw.copy(order="C"), self.device)

    def as_strided(self, shape, strides):
        """A view with the given shape and strides (in elements), starting at this array's first element.

        The view must lie within this array's buffer (its ``_handle``); IndexError otherwise.
        """
        raw = self.raw
        try:  # the common case, a view within this array's own span, needs no look at the buffer
            if not raw.size:
                raise IndexError
            low, high = element_reach(raw.shape, self.strides)
            shape, strides, _ = check_view(shape, strides, -low, high - low + 1, "as_strided")
        except IndexError:  # elsewhere in the buffer is fine too, as the course's as_strided allows
            shape, strides, _ = check_view(shape, strides, self._offset, self._handle.size, "as_strided")
        itemsize = raw.itemsize
        byte_strides = tuple(s * itemsize for s in strides)
        view = self.device.xp.lib.stride_tricks.as_strided(raw, shape=shape, strides=byte_strides)
        if view.__class__ is not raw.__class__:
            # NOTE: numpy's as_strided returns a plain array; an ndl.compile trace (a numpy subclass)
            # must stay one, or what is computed from the view would be frozen into the replay
            view = view.view(raw.__class__)
        return NDArray.wrap(view, self.device)

    def reshape(self, new_shape):
        return NDArray.wrap(self.raw.reshape(new_shape), self.device)

    def permute(self, new_axes):
        return NDArray.wrap(self.raw.transpose(new_axes), self.device)

    def broadcast_to(self, new_shape):
        return NDArray.wrap(self.device.xp.broadcast_to(self.raw, new_shape), self.device)

    def flip(self, axes):
        return NDArray.wrap(self.device.xp.flip(self.raw, axes), self.device)

    def pad(self, axes):
        """Zero padding: ``axes`` holds one ``(before, after)`` pair per dimension."""
        return NDArray.wrap(self.device.xp.pad(self.raw, axes), self.device)

    def fill(self, value):
        """Set every element to ``value``, in place."""
        self.raw.fill(value)

    def __getitem__(self, index):
        return _wrap(self.raw[_raw_index(index)], self.device)

    def __setitem__(self, index, value):
        self.raw[_raw_index(index)] = value.raw if isinstance(value, NDArray) else value

    # ---- arithmetic -----------------------------------------------------------------------
    def _other(self, other):
        if isinstance(other, NDArray):
            if other.device is not self.device:
                raise ValueError(
                    f"cannot combine an array on {self.device} with one on {other.device}: "
                    "move one with .to(device) first"
                )
            return other.raw
        if isinstance(other, numpy.generic):
            # NOTE: under numpy 2 a numpy float64 scalar would upcast a float32 array; a Python number does not.
            other = other.item()
        if isinstance(other, int) and not isinstance(other, bool) and self.raw.dtype.kind in "iu":
            limits = numpy.iinfo(self.raw.dtype)
            if not limits.min <= other <= limits.max:
                # NOTE: numpy 2 raises here (NEP 50); numpy 1 would silently switch to float64 or
                # object arithmetic. Raising on both keeps one behaviour across the numpy range.
                raise OverflowError(f"Python integer {other} out of bounds for {self.raw.dtype}")
        if self.raw.ndim == 0 and isinstance(other, (int, float)):
            # NOTE: numpy 1 treats a 0-d array as a scalar, so float32 0-d / 6 gave float64; numpy 2
            # keeps float32. Casting the Python number to the array's dtype gives numpy 2's result on both.
            kind = self.raw.dtype.kind
            if kind == "f" or (kind == "i" and isinstance(other, int)) or (kind == "u" and isinstance(other, int) and other >= 0):
                return self.raw.dtype.type(other)
        return other

    def __add__(self, other):
        return _wrap(self.raw + self._other(other), self.device)

    __radd__ = __add__

    def __sub__(self, other):
        return _wrap(self.raw - self._other(other), self.device)

    def __rsub__(self, other):
        return _wrap(self._other(other) - self.raw, self.device)

    def __mul__(self, other):
        return _wrap(self.raw * self._other(other), self.device)

    __rmul__ = __mul__

    def __truediv__(self, other):
        return _wrap(self.raw / self._other(other), self.device)

    def __rtruediv__(self, other):
        return _wrap(self._other(other) / self.raw, self.device)

    def __pow__(self, other):
        return _wrap(self.raw ** self._other(other), self.device)

    def __rpow__(self, other):
        return _wrap(self._other(other) ** self.raw, self.device)

    def __neg__(self):
        return NDArray.wrap(-self.raw, self.device)

    def __matmul__(self, other):
        return _wrap(matmul(self.raw, self._other(other)), self.device)

    def __rmatmul__(self, other):
        return _wrap(matmul(self._other(other), self.raw), self.device)

    def __eq__(self, other):
        return _wrap(self.raw == self._other(other), self.device)

    def __ne__(self, other):
        return _wrap(self.raw != self._other(other), self.device)

    def __lt__(self, other):
        return _wrap(self.raw < self._other(other), self.device)

    def __le__(self, other):
        return _wrap(self.raw <= self._other(other), self.device)

    def __gt__(self, other):
        return _wrap(self.raw > self._other(other), self.device)

    def __ge__(self, other):
        return _wrap(self.raw >= self._other(other), self.device)

    __hash__ = None

    def maximum(self, other):
        return _wrap(self.device.xp.maximum(self.raw, self._other(other)), self.device)

    def log(self):
        return NDArray.wrap(self.device.xp.log(self.raw), self.device)

    def exp(self):
        return NDArray.wrap(self.device.xp.exp(self.raw), self.device)

    def tanh(self):
        return NDArray.wrap(self.device.xp.tanh(self.raw), self.device)

    def abs(self):
        return NDArray.wrap(self.device.xp.abs(self.raw), self.device)

    def sqrt(self):
        return NDArray.wrap(self.device.xp.sqrt(self.raw), self.device)

    def isfinite(self):
        """True where the element is neither infinite nor nan."""
        return NDArray.wrap(self.device.xp.isfinite(self.raw), self.device)

    # ---- reductions (a full reduction still returns an array, never a Python scalar) ------
    def sum(self, axis=None, keepdims=False):
        return _wrap(self.raw.sum(axis=_axis(axis), keepdims=keepdims), self.device)

    def max(self, axis=None, keepdims=False):
        return _wrap(self.raw.max(axis=_axis(axis), keepdims=keepdims), self.device)

    def mean(self, axis=None, keepdims=False):
        return _wrap(self.raw.mean(axis=_axis(axis), keepdims=keepdims), self.device)

    def argmax(self, axis=None):
        return _wrap(self.raw.argmax(axis=axis), self.device)


def _wrap(raw, device):
    """Wrap an array-module result; numpy turns 0-d results into scalars, which are made arrays again."""
    if not isinstance(raw, device._array_type):
        raw = device.xp.asarray(raw)
    return NDArray.wrap(raw, device)


def _axis(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def _raw_index(index):
    if isinstance(index, NDArray):
        return index.raw
    if isinstance(index, tuple):
        return tuple(i.raw if isinstance(i, NDArray) else i for i in index)
    return index


def _move(raw, device: Device):
    if device.name == "cpu":
        return raw if isinstance(raw, numpy.ndarray) else raw.get()
    return device.xp.asarray(raw)
