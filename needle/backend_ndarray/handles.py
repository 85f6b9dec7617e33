"""Flat buffers ("handles") and the course's device functions over them.

The course's NDArray keeps its elements in a flat buffer, the ``_handle``, and each device is a
module of functions that read and write such buffers: ``ewise_add(a, b, out)``, ``compact(a, out,
shape, strides, offset)``, ``matmul_tiled(a, b, out, m, n, p)`` ... needle's NDArray does its work
through numpy or CuPy directly, so these functions exist for code written against the course's
device interface (``device.ewise_add(x._handle, ...)``); each is one array-module call over the
flat buffers. One :class:`HandleFunctions` serves numpy and CuPy alike.

Example:
    >>> import needle.backend_ndarray as nd
    >>> device = nd.cpu()
    >>> a, b, out = device.Array(3), device.Array(3), device.Array(3)
    >>> device.fill(a, 2.0); device.fill(b, 0.5)
    >>> device.ewise_mul(a, b, out)
    >>> out.array.tolist(), out.size
    ([1.0, 1.0, 1.0], 3)
"""
import operator
import weakref

import numpy

from .device import resolve_dtype

TILE_SIZE = 8
"""The tile edge of ``matmul_tiled``'s tile-major layout, the course's CPU ``TILE``."""


def data_pointer(raw) -> int:
    """The address of the first element of a numpy or CuPy array."""
    if isinstance(raw, numpy.ndarray):
        return raw.__array_interface__["data"][0]
    return raw.data.ptr


def check_view(shape, strides, offset, handle_size: int, caller: str):
    """Check that the view ``shape``/``strides``/``offset`` reads only elements ``0 .. handle_size - 1``.

    O(ndim): the lowest element is ``offset`` plus ``(n - 1) * stride`` over the axes with negative
    strides, the highest the same over positive strides. A view with no elements reads nothing
    and always passes (its offset must still not be negative). Returns the three as int tuples.

    Example:
        >>> from needle.backend_ndarray.handles import check_view
        >>> check_view((2, 2), (2, 1), 0, 4, "make")
        ((2, 2), (2, 1), 0)
        >>> check_view((4,), (3,), 0, 4, "make")
        Traceback (most recent call last):
        ...
        IndexError: make(shape=(4,), strides=(3,), offset=0) reaches elements 0 to 9 of a handle of 4 elements (0 to 3): the view must lie within its handle
    """
    shape, strides = _int_tuple(shape, "shape", caller), _int_tuple(strides, "strides", caller)
    offset = _int_tuple((offset,), "offset", caller)[0]

    def described():  # NOTE: formatted only for an error: the check itself stays a few additions
        return f"{caller}(shape={shape}, strides={strides}, offset={offset})"

    if len(shape) != len(strides):
        raise ValueError(f"{described()}: shape and strides need one entry per axis, got {len(shape)} and {len(strides)}")
    if offset < 0:
        raise IndexError(
            f"{described()}: the offset is negative; it counts elements from the start of the handle "
            f"(0 to {handle_size - 1}), so it must be 0 or more"
        )
    low = high = offset
    for size, stride in zip(shape, strides):
        if size <= 0:
            if size < 0:
                raise ValueError(f"{described()}: a shape cannot have negative sizes")
            return shape, strides, offset  # no elements: nothing is read
        if stride < 0:
            low += (size - 1) * stride
        else:
            high += (size - 1) * stride
    if low < 0 or high >= handle_size:
        if any(size < 0 for size in shape):
            raise ValueError(f"{described()}: a shape cannot have negative sizes")
        if 0 in shape:
            return shape, strides, offset
        raise IndexError(
            f"{described()} reaches elements {low} to {high} of a handle of {handle_size} elements "
            f"(0 to {handle_size - 1}): the view must lie within its handle"
        )
    return shape, strides, offset


def element_reach(shape, strides):
    """The lowest and highest element a non-empty view reads, counted from its first element."""
    low = high = 0
    for size, stride in zip(shape, strides):
        if stride < 0:
            low += (size - 1) * stride
        else:
            high += (size - 1) * stride
    return low, high


def _int_tuple(values, name, caller):
    try:
        return tuple(map(operator.index, values))
    except TypeError:
        raise TypeError(f"{caller}: {name} must hold integers, got {values!r}") from None


def strided_view(xp, a: "Handle", shape, strides, offset: int, caller: str = "strided view"):
    """A view of handle ``a`` with ``shape``, element ``strides`` and element ``offset``.

    Raises IndexError (and makes nothing) unless every element of the view lies within ``a``.
    """
    flat = a.array
    shape, strides, offset = check_view(shape, strides, offset, flat.size, caller)
    byte_strides = tuple(s * flat.itemsize for s in strides)
    view = xp.lib.stride_tricks.as_strided(flat[offset:], shape, byte_strides)
    if getattr(view, "base", None) is None:
        remember_base(view, flat)
    return view


# NOTE: CuPy's as_strided makes a view without a base; the flat array it was made over is kept
# here, by the view's id, for as long as the view lives, so that its _handle is that buffer, as
# numpy's base chain gives it.
_STRIDED_BASES = {}


def remember_base(view, flat):
    """Record that ``view`` (an array without a base) was made over the flat array ``flat``."""
    key = id(view)

    def forget(reference):
        if _STRIDED_BASES.get(key, (None,))[0] is reference:
            del _STRIDED_BASES[key]

    _STRIDED_BASES[key] = (weakref.ref(view, forget), flat)


def remembered_base(array):
    """The flat array a base-less strided ``array`` was made over (see :func:`remember_base`), or None."""
    entry = _STRIDED_BASES.get(id(array))
    if entry is not None and entry[0]() is array:
        return entry[1]
    return None


class Handle:
    """A flat 1-D buffer on one device: the course's ``Array`` (an NDArray's ``_handle``).

    Args:
        size: number of elements to allocate.
        dtype: element type (float32, the course's only one, by default).

    ``array`` is the flat numpy (or CuPy) array itself; ``ptr()`` is the address of its start.
    """

    __slots__ = ("array",)
    xp = numpy

    def __init__(self, size: int, dtype="float32"):
        self.array = self.xp.empty(int(size), dtype=resolve_dtype(dtype))

    @classmethod
    def over(cls, flat) -> "Handle":
        """A handle over the existing flat array ``flat`` (shared, not copied)."""
        handle = cls.__new__(cls)
        handle.array = flat
        return handle

    @property
    def size(self) -> int:
        return self.array.size

    def ptr(self) -> int:
        return data_pointer(self.array)

    def __repr__(self):
        return f"{type(self).__name__}(size={self.size}, ptr={self.ptr():#x})"


class HandleFunctions:
    """The course's device module over flat handles, for one array module (numpy or CuPy).

    ``a``, ``b`` and ``out`` are :class:`Handle` objects; element-wise functions and reductions
    expect compact handles (``x.compact()._handle``), as the course's do.
    """

    __tile_size__ = TILE_SIZE

    def __init__(self, xp, device_name: str):
        self.xp = xp
        self.__device_name__ = device_name
        self.Array = type("Array", (Handle,), {"__slots__": (), "xp": xp})

    # ---- moving data in and out ---------------------------------------------------------------
    def _strided(self, a: Handle, shape, strides, offset: int, caller: str):
        return strided_view(self.xp, a, shape, strides, offset, caller)

    def to_numpy(self, a: Handle, shape, strides, offset: int) -> numpy.ndarray:
        """The elements at ``shape``/``strides``/``offset`` of ``a`` as a numpy array (a view on CPU)."""
        view = self._strided(a, shape, strides, offset, "to_numpy")
        return view if isinstance(view, numpy.ndarray) else view.get()

    def from_numpy(self, a, out: Handle) -> None:
        """Copy the numpy array ``a``, flattened, into ``out``."""
        out.array[:] = self.xp.asarray(a).reshape(-1)

    def fill(self, out: Handle, val) -> None:
        out.array.fill(val)

    def compact(self, a: Handle, out: Handle, shape, strides, offset: int) -> None:
        """Write the strided view of ``a`` into ``out`` in row-major order."""
        view = self._strided(a, shape, strides, offset, "compact")
        if out.size != view.size:
            raise ValueError(f"compact: out has {out.size} elements, the view of shape {view.shape} has {view.size}")
        out.array[:] = view.reshape(-1)

    def ewise_setitem(self, a: Handle, out: Handle, shape, strides, offset: int) -> None:
        """Write the compact ``a`` into the strided view of ``out``."""
        view = self._strided(out, shape, strides, offset, "ewise_setitem")
        if a.size < view.size:
            raise ValueError(f"ewise_setitem: a has {a.size} elements, the view of shape {view.shape} needs {view.size}")
        view[...] = a.array[: view.size].reshape(view.shape)

    def scalar_setitem(self, size: int, val, out: Handle, shape, strides, offset: int) -> None:
        """Set every element of the strided view of ``out`` to ``val``."""
        self._strided(out, shape, strides, offset, "scalar_setitem")[...] = val

    # ---- element-wise and scalar functions (out[i] = f(a[i], b[i] or val)) ---------------------
    def ewise_add(self, a, b, out):
        _same_size("ewise_add", a=a, b=b, out=out)
        self.xp.add(a.array, b.array, out=out.array)

    def scalar_add(self, a, val, out):
        _same_size("scalar_add", a=a, out=out)
        self.xp.add(a.array, val, out=out.array)

    def ewise_mul(self, a, b, out):
        _same_size("ewise_mul", a=a, b=b, out=out)
        self.xp.multiply(a.array, b.array, out=out.array)

    def scalar_mul(self, a, val, out):
        _same_size("scalar_mul", a=a, out=out)
        self.xp.multiply(a.array, val, out=out.array)

    def ewise_div(self, a, b, out):
        _same_size("ewise_div", a=a, b=b, out=out)
        self.xp.divide(a.array, b.array, out=out.array)

    def scalar_div(self, a, val, out):
        _same_size("scalar_div", a=a, out=out)
        self.xp.divide(a.array, val, out=out.array)

    def scalar_power(self, a, val, out):
        _same_size("scalar_power", a=a, out=out)
        self.xp.power(a.array, val, out=out.array)

    def ewise_maximum(self, a, b, out):
        _same_size("ewise_maximum", a=a, b=b, out=out)
        self.xp.maximum(a.array, b.array, out=out.array)

    def scalar_maximum(self, a, val, out):
        _same_size("scalar_maximum", a=a, out=out)
        self.xp.maximum(a.array, val, out=out.array)

    def ewise_eq(self, a, b, out):
        _same_size("ewise_eq", a=a, b=b, out=out)
        out.array[:] = a.array == b.array  # NOTE: 1.0 where true, 0.0 elsewhere, as the course does

    def scalar_eq(self, a, val, out):
        _same_size("scalar_eq", a=a, out=out)
        out.array[:] = a.array == val

    def ewise_ge(self, a, b, out):
        _same_size("ewise_ge", a=a, b=b, out=out)
        out.array[:] = a.array >= b.array

    def scalar_ge(self, a, val, out):
        _same_size("scalar_ge", a=a, out=out)
        out.array[:] = a.array >= val

    def ewise_log(self, a, out):
        _same_size("ewise_log", a=a, out=out)
        self.xp.log(a.array, out=out.array)

    def ewise_exp(self, a, out):
        _same_size("ewise_exp", a=a, out=out)
        self.xp.exp(a.array, out=out.array)

    def ewise_tanh(self, a, out):
        _same_size("ewise_tanh", a=a, out=out)
        self.xp.tanh(a.array, out=out.array)

    # ---- matrix products and reductions ---------------------------------------------------------
    def matmul(self, a: Handle, b: Handle, out: Handle, m: int, n: int, p: int) -> None:
        """``out`` (m x p) = ``a`` (m x n) @ ``b`` (n x p), all compact row-major."""
        _holds("matmul", a=(a, m * n), b=(b, n * p), out=(out, m * p))
        left = a.array[: m * n].reshape(m, n)
        right = b.array[: n * p].reshape(n, p)
        out.array[: m * p] = (left @ right).reshape(-1)

    def matmul_tiled(self, a: Handle, b: Handle, out: Handle, m: int, n: int, p: int) -> None:
        """The product of tile-major matrices: ``a`` is (m/t, n/t, t, t), ``b`` (n/t, p/t, t, t),
        ``out`` (m/t, p/t, t, t), with t = ``__tile_size__``; block (i, j) of ``out`` is the sum over
        k of block (i, k) of ``a`` times block (k, j) of ``b``."""
        t = self.__tile_size__
        for name, dim in (("m", m), ("n", n), ("p", p)):
            if dim % t:
                raise ValueError(f"matmul_tiled needs dimensions divisible by the tile size {t}: {name}={dim}")
        _holds("matmul_tiled", a=(a, m * n), b=(b, n * p), out=(out, m * p))
        left = a.array[: m * n].reshape(m // t, n // t, t, t)
        right = b.array[: n * p].reshape(n // t, p // t, t, t)
        product = self.xp.einsum("ikab,kjbc->ijac", left, right)
        out.array[: m * p] = product.reshape(-1)

    def reduce_max(self, a: Handle, out: Handle, reduce_size: int) -> None:
        """``out[i]`` = max of the ``reduce_size`` consecutive elements of ``a`` starting at i * reduce_size."""
        _holds("reduce_max", a=(a, out.size * reduce_size))
        out.array[:] = a.array[: out.size * reduce_size].reshape(out.size, reduce_size).max(axis=1)

    def reduce_sum(self, a: Handle, out: Handle, reduce_size: int) -> None:
        """``out[i]`` = sum of the ``reduce_size`` consecutive elements of ``a`` starting at i * reduce_size."""
        _holds("reduce_sum", a=(a, out.size * reduce_size))
        out.array[:] = a.array[: out.size * reduce_size].reshape(out.size, reduce_size).sum(axis=1)


NAMES = frozenset(
    name for name in vars(HandleFunctions) if not name.startswith("_") or name == "__tile_size__"
) | {"Array", "__device_name__"}
"""The names a device answers from its handle functions (``device.ewise_add``, ``device.Array``...)."""


def _holds(caller: str, **needs) -> None:
    """Raise ValueError unless each handle holds at least the elements the call reads or writes."""
    for name, (handle, needed) in needs.items():
        if handle.size < needed:
            raise ValueError(f"{caller}: {name} has {handle.size} elements, the call needs {needed}")


def _same_size(caller: str, **handles: Handle) -> None:
    """Raise ValueError unless the handles hold as many elements each (the course's element-wise
    functions run over one length: they never broadcast, and never read past a shorter handle)."""
    sizes = {name: handle.size for name, handle in handles.items()}
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{name} has {size}" for name, size in sizes.items())
        raise ValueError(f"{caller}: the handles must hold as many elements each; {listed} (pass compact handles of one size)")

