"""Devices: small objects that own an array module (numpy on CPU, CuPy on CUDA).

A device knows how to make arrays on itself; everything else about an array lives in
:class:`~needle.backend_ndarray.ndarray.NDArray`. CuPy is imported only when a CUDA device is
first asked for; a machine without it never pays for the import, and the original import error
is kept to be shown when a user calls ``cuda()``.
"""
from typing import TYPE_CHECKING

import numpy

from .kernels import ArrayRoutines

if TYPE_CHECKING:  # for the annotations (and pdoc); the module imports NDArray lazily
    from .ndarray import NDArray

_FLOAT_KINDS = "f"


class Device:
    """A place where arrays live, backed by one array module (``numpy`` or ``cupy``).

    Devices are singletons: ``cpu() is cpu()``, so comparing them is an identity check.

    Attributes:
        xp: the array module behind this device (numpy or cupy); reading it on a device that
            is not available raises RuntimeError saying what to install.
        kernels: this device's kernels (optimizer updates, softmax cross-entropy, ReLU
            backward): in-place array-module code on the CPU, one CuPy kernel per routine on
            CUDA; see :mod:`needle.backend_ndarray.kernels`. Made on first read.

    Example:
        >>> import needle as ndl
        >>> ndl.cpu().name, ndl.cpu().enabled()
        ('cpu', True)
        >>> ndl.cpu().array([1, 2]).dtype
        dtype('float32')
    """

    # NOTE: ``xp`` and ``kernels`` are slots filled on first read (by __getattr__, which Python
    # calls only while a slot is empty), not properties: every op and optimizer step reads
    # them, and a slot costs no Python call.
    __slots__ = ("name", "xp", "kernels", "_xp", "_array_type", "_unavailable_reason", "_handle_functions")

    def __init__(self, name, xp=None, unavailable_reason=None):
        self.name = name
        self._xp = xp
        if xp is not None:
            self.xp = xp
        self._array_type = xp.ndarray if xp is not None else None
        self._unavailable_reason = unavailable_reason
        self._handle_functions = None

    def enabled(self):
        """True when arrays can be made on this device (CuPy and a GPU are present)."""
        return self._xp is not None

    def _unavailable(self):
        """The error that reading ``xp`` on a device without its array module raises."""
        return RuntimeError(
            f"device {self.name}() is not available: {self._unavailable_reason}. "
            "Install CuPy for your CUDA version (pip install 'needle-dl[cuda]' for CUDA 12, "
            "'needle-dl[cuda13]' for CUDA 13) on a machine with an NVIDIA GPU, or use ndl.cpu()."
        )

    def _make_kernels(self):
        """This device's kernels (optimizer updates, softmax cross-entropy, ReLU backward), read as ``kernels``.

        In-place array-module code on the CPU, one CuPy kernel per routine on CUDA; see
        :mod:`needle.backend_ndarray.kernels`.
        """
        xp = self.xp
        if xp is numpy:
            return ArrayRoutines(xp)
        from .kernels_cupy import CupyKernels

        return CupyKernels(xp)

    @property
    def fused(self):
        """The old name of :attr:`kernels` (kept for code written before the rename).

        Example:
            >>> import needle as ndl
            >>> ndl.cpu().fused is ndl.cpu().kernels
            True
        """
        return self.kernels

    @property
    def mod(self):
        """The course's device module: functions over flat handles (``ewise_add``, ``matmul_tiled``...).

        The device answers their names itself, as the course's ``BackendDevice`` does:
        ``device.ewise_add(a._handle, b._handle, out._handle)``, ``device.__tile_size__``,
        ``device.Array(size)``. See :mod:`needle.backend_ndarray.handles`.
        """
        if self._handle_functions is None:
            from .handles import HandleFunctions

            self._handle_functions = HandleFunctions(self.xp, "numpy" if self.name == "cpu" else self.name)
        return self._handle_functions

    def __getattr__(self, name):
        # Reached only for names that are not set: the empty ``xp``/``kernels`` slots and the course's handle functions.
        if name == "xp":
            raise self._unavailable()
        if name == "kernels":
            self.kernels = kernels = self._make_kernels()
            return kernels
        from .handles import NAMES

        if name in NAMES:
            return getattr(self.mod, name)
        raise AttributeError(f"device {self.name}() has no attribute {name!r}")

    def __repr__(self):
        return f"{self.name}()"

    def __reduce__(self):
        return (_device_by_name, (self.name,))

    # ---- array creation -------------------------------------------------------------------
    def array(self, obj, dtype=None):
        """An array of this device's module holding ``obj`` (copies only when it must).

        Python lists and scalars become float32 unless ``dtype`` says otherwise; numpy and
        CuPy arrays keep their dtype.
        """
        xp = self.xp
        if dtype is not None:
            dtype = resolve_dtype(dtype)
        if isinstance(obj, self._array_type):
            return obj if dtype is None or obj.dtype == dtype else obj.astype(dtype)
        if self.name == "cpu" and hasattr(obj, "get") and not isinstance(obj, numpy.ndarray):
            obj = obj.get()  # a CuPy array coming to the host
        if dtype is None and not hasattr(obj, "dtype"):
            dtype = numpy.float32
        return xp.asarray(obj, dtype=dtype)

    # NOTE: the course's constructors below return NDArrays on this device, as the course's
    # BackendDevice does; ``array`` and ``from_host`` are needle's own and give raw arrays.
    def empty(self, shape, dtype="float32") -> "NDArray":
        """An uninitialised NDArray of ``shape``."""
        return _ndarray(self.xp.empty(_shape_of((shape,)), dtype=resolve_dtype(dtype)), self)

    def full(self, shape, fill_value, dtype="float32") -> "NDArray":
        """An NDArray of ``shape`` filled with ``fill_value``.

        Example:
            >>> import needle as ndl
            >>> ndl.cpu().full((2,), 7.0)
            NDArray(array([7., 7.], dtype=float32), device=cpu())
        """
        return _ndarray(self.xp.full(_shape_of((shape,)), fill_value, dtype=resolve_dtype(dtype)), self)

    def zeros(self, *shape, dtype="float32") -> "NDArray":
        return _ndarray(self.xp.zeros(_shape_of(shape), dtype=resolve_dtype(dtype)), self)

    def ones(self, *shape, dtype="float32") -> "NDArray":
        return _ndarray(self.xp.ones(_shape_of(shape), dtype=resolve_dtype(dtype)), self)

    def from_host(self, host_array, dtype="float32"):
        """Move a numpy array drawn on the host to this device, cast to ``dtype`` (a raw array)."""
        host_array = numpy.asanyarray(host_array)  # NOTE: keeps an ndl.compile trace (a numpy subclass)
        dtype = resolve_dtype(dtype)
        if host_array.dtype != dtype:
            host_array = host_array.astype(dtype)
        return host_array if self.name == "cpu" else self.xp.asarray(host_array)

    def rand(self, *shape, dtype="float32") -> "NDArray":
        """Uniform [0, 1) numbers, drawn with ``numpy.random.rand`` so seeds reproduce on every device.

        Example:
            >>> import numpy, needle as ndl
            >>> numpy.random.seed(0)
            >>> [round(v, 4) for v in ndl.cpu().rand(2).numpy().tolist()]
            [0.5488, 0.7152]
        """
        return _ndarray(self.from_host(numpy.random.rand(*_shape_of(shape)), dtype), self)

    def randn(self, *shape, dtype="float32") -> "NDArray":
        """Standard normal numbers, drawn with ``numpy.random.randn`` on the host."""
        return _ndarray(self.from_host(numpy.random.randn(*_shape_of(shape)), dtype), self)

    def one_hot(self, n, i, dtype="float32") -> "NDArray":
        """Rows of the ``n``-by-``n`` identity picked by the integer labels ``i``.

        Float labels must be whole numbers (the course's loaders give float labels such as 3.0);
        a fractional, NaN or infinite label raises ValueError naming it, bool labels TypeError.

        Example:
            >>> import needle as ndl
            >>> ndl.cpu().one_hot(3, [2.0, 0.0]).numpy().tolist()
            [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
        """
        xp = self.xp
        labels = xp.asanyarray(getattr(i, "raw", i))  # NOTE: any: an ndl.compile trace stays one
        indices = whole_number_labels(labels, xp, "one_hot")
        out = xp.zeros(indices.shape + (n,), dtype=resolve_dtype(dtype))
        xp.put_along_axis(out, indices[..., None], 1, axis=-1)
        return _ndarray(out, self)


def whole_number_labels(labels, xp, caller: str):
    """``labels`` as int64, checking that float labels are whole numbers (one pass, no copy for ints)."""
    kind = labels.dtype.kind
    if kind in "iu":
        return labels.astype(numpy.int64, copy=False)
    if kind != "f":
        raise TypeError(f"{caller}: labels must be integers (or whole-number floats), got dtype {labels.dtype}")
    whole = xp.isfinite(labels) & (labels == xp.floor(labels))
    if not bool(whole.all()):
        bad = labels[~whole]
        shown = ", ".join(repr(float(v)) for v in bad[:5].tolist())
        more = f" and {bad.size - 5} more" if bad.size > 5 else ""
        raise ValueError(
            f"{caller}: labels must be whole numbers, got {shown}{more} (of {labels.size} labels): "
            "a fractional or NaN label names no class; round the labels or fix the data that gave them"
        )
    return labels.astype(numpy.int64)


def _ndarray(raw, device: Device) -> "NDArray":
    from .ndarray import NDArray  # NOTE: ndarray.py imports this module, so NDArray is looked up here

    return NDArray.wrap(raw, device)


def device_of(obj) -> Device:
    """The needle Device holding ``obj``: its ``.device`` when that is a needle Device, else the
    device of a foreign array (``cuda()`` for CuPy arrays, ``cpu()`` for anything else).

    Only needle Devices count: numpy 2 arrays carry the array-API string ``.device == "cpu"`` and
    CuPy arrays a ``cupy.cuda.Device``; both are host or device data, never a needle Device.

    Example:
        >>> import numpy, needle as ndl
        >>> from needle.backend_ndarray import device_of
        >>> device_of(numpy.zeros(2)) is ndl.cpu(), device_of(ndl.Tensor([1.0])) is ndl.cpu()
        (True, True)
    """
    device = getattr(obj, "device", None)
    if isinstance(device, Device):
        return device
    if hasattr(obj, "__cuda_array_interface__") and not isinstance(obj, numpy.ndarray):
        return cuda()
    return cpu()


class CPUDevice(Device):
    """The class of the CPU device (the course's ``backend_numpy.CPUDevice``); ``cpu()`` is its one instance."""

    __slots__ = ()


def _shape_of(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return shape


_DTYPE_CACHE = {}


def resolve_dtype(dtype):
    """numpy's dtype object for ``dtype`` ("float32", numpy.float32, ...), with a clear error."""
    try:
        return _DTYPE_CACHE[dtype]
    except (KeyError, TypeError):
        pass
    try:
        resolved = numpy.dtype(dtype)
    except TypeError as error:
        raise TypeError(
            f"unknown dtype {dtype!r}: use a numpy dtype name such as 'float32', 'float64' or 'int64'"
        ) from error
    try:
        _DTYPE_CACHE[dtype] = resolved
    except TypeError:
        pass
    return resolved


def _load_cupy():
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None, "CuPy found no CUDA GPU"
        return cupy, None
    except Exception as error:  # ImportError, or a CUDA driver error
        return None, f"{type(error).__name__}: {error}"


_CPU = CPUDevice("cpu", numpy)
_CUDA = None


def cpu():
    """The CPU device (numpy arrays)."""
    return _CPU


def cuda():
    """The CUDA device (CuPy arrays). Check ``cuda().enabled()`` before using it."""
    global _CUDA
    if _CUDA is None:
        cupy, reason = _load_cupy()
        _CUDA = Device("cuda", cupy, unavailable_reason=reason)
    return _CUDA


def default_device():
    """The device used when none is given: the CPU."""
    return _CPU


def as_device(spec: "Device | str | None") -> Device:
    """The device named by ``spec``: a Device, "cpu", "cuda" or "cuda:0"; None means the default.

    Every public function that takes ``device=`` resolves it here, so strings work everywhere
    (``tensor.to("cpu")``, ``model.to("cuda")``, ``init.zeros(2, device="cpu")``). A CUDA device
    is returned even where CuPy is missing; using it raises the error that says why.

    Example:
        >>> import needle as ndl
        >>> from needle.backend_ndarray import as_device
        >>> as_device("cpu") is ndl.cpu(), as_device(None) is ndl.cpu(), as_device(ndl.cpu()) is ndl.cpu()
        (True, True, True)
    """
    if spec is None:
        return default_device()
    if isinstance(spec, Device):
        return spec
    if isinstance(spec, str):
        name = spec.strip().lower()
        if name == "cpu":
            return cpu()
        if name in ("cuda", "cuda:0"):
            return cuda()
        raise ValueError(
            f"unknown device {spec!r}: use 'cpu', 'cuda' (needle uses one GPU, 'cuda:0'), "
            "ndl.cpu() or ndl.cuda()"
        )
    raise TypeError(
        f"device must be a needle device or a string such as 'cpu' or 'cuda', "
        f"got {type(spec).__name__} {spec!r}"
    )


def all_devices():
    """Every device this build knows, enabled or not."""
    return [cpu(), cuda()]


def _device_by_name(name):
    return cpu() if name == "cpu" else cuda()
