"""Module-level array functions, the course's ``array_api``: each takes and returns NDArrays."""
from .device import as_device, resolve_dtype
from .ndarray import NDArray, _wrap


def array(a, dtype="float32", device=None):
    """An NDArray holding ``a`` on ``device`` (default: CPU), as ``dtype``."""
    if device is None:
        device = a.device if isinstance(a, NDArray) else None  # None: where the array lives, else the CPU
    return NDArray(a, device=device, dtype=dtype)


def empty(shape, dtype="float32", device=None):
    device = as_device(device)
    return NDArray.make(device.empty(shape, dtype), device)


def full(shape, fill_value, dtype="float32", device=None):
    device = as_device(device)
    return NDArray.make(device.full(shape, fill_value, dtype), device)


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
    return NDArray.make(device.xp.stack([a.raw for a in arrays], axis=axis), device)


def split(a, axis=0):
    """The slices of ``a`` along ``axis``, that axis removed (views, no copies)."""
    xp = a.device.xp
    return tuple(NDArray.make(piece, a.device) for piece in xp.moveaxis(a.raw, axis, 0))


def astype(a, dtype):
    return a.astype(resolve_dtype(dtype))


def where(condition, x, y):
    device = condition.device
    raw = lambda v: v.raw if isinstance(v, NDArray) else v  # noqa: E731
    return _wrap(device.xp.where(raw(condition), raw(x), raw(y)), device)
