"""Module-level array functions, the course's ``array_api``: each takes and returns NDArrays."""
import numpy

from .device import as_device, device_of, resolve_dtype
from .ndarray import NDArray, _wrap


def array(a, dtype="float32", device=None):
    """An NDArray holding ``a`` on ``device`` (default: where ``a`` is, else the CPU), as ``dtype``.

    Always a copy, as the course's ``array`` and ``numpy.array`` make (``NDArray(a)`` shares
    an array it can). ``dtype=None`` keeps the dtype of an array ``a``. A numpy 2 array's
    ``.device`` (the string ``"cpu"``) is not a needle device: it is host data, placed on ``device``.

    Example:
        >>> import numpy as np
        >>> from needle import backend_ndarray as nd
        >>> nd.array(np.arange(3)).dtype, nd.array(np.arange(3), dtype=None).dtype
        (dtype('float32'), dtype('int64'))
    """
    made = NDArray(a, device=device_of(a) if device is None else as_device(device), dtype=dtype)
    if _may_share_memory(made, a):
        made = NDArray.wrap(made.raw.copy(), made.device)
    return made


def _may_share_memory(made: NDArray, source) -> bool:
    xp = made.device.xp
    source = source.raw if isinstance(source, NDArray) else source
    if not isinstance(source, xp.ndarray):
        if xp is not numpy or not hasattr(source, "__array__"):
            return False
        source = numpy.asarray(source)
    return bool(xp.may_share_memory(made.raw, source))


def empty(shape, dtype="float32", device=None):
    device = as_device(device)
    return device.empty(shape, dtype)


def full(shape, fill_value, dtype="float32", device=None):
    device = as_device(device)
    return device.full(shape, fill_value, dtype)


def zeros(shape, dtype="float32", device=None):
    return full(shape, 0, dtype, device)


def ones(shape, dtype="float32", device=None):
    return full(shape, 1, dtype, device)


def broadcast_to(array, new_shape):
    return array.broadcast_to(new_shape)


def reshape(array, new_shape):
    return array.reshape(new_shape)


def maximum(a, b):
    return a.maximum(b)


def log(a):
    return a.log()


def exp(a):
    return a.exp()


def tanh(a):
    return a.tanh()


def sum(a, axis=None, keepdims=False):
    return a.sum(axis=axis, keepdims=keepdims)


def max(a, axis=None, keepdims=False):
    return a.max(axis=axis, keepdims=keepdims)


def flip(a, axes):
    return a.flip(axes)


def stack(arrays, axis=0):
    """Join equally shaped arrays along a new axis."""
    device = arrays[0].device
    return NDArray.wrap(device.xp.stack([a.raw for a in arrays], axis=axis), device)


def split(a, axis=0):
    """The slices of ``a`` along ``axis``, that axis removed (views, no copies)."""
    xp = a.device.xp
    return tuple(NDArray.wrap(piece, a.device) for piece in xp.moveaxis(a.raw, axis, 0))


def transpose(a, axes):
    """``a`` with its axes permuted to ``axes`` (a view)."""
    return a.permute(axes)


def astype(a, dtype):
    return a.astype(resolve_dtype(dtype))


def where(condition, x, y):
    device = condition.device
    raw = lambda v: v.raw if isinstance(v, NDArray) else v  # noqa: E731
    return _wrap(device.xp.where(raw(condition), raw(x), raw(y)), device)
