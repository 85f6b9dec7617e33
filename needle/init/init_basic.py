"""Tensors filled with constants or random numbers, drawn with the course's exact numpy calls.

Random draws always come from numpy's global generator on the host (then move to the device), so
``numpy.random.seed(0)`` reproduces the course's reference values on every device.
"""
import numpy

from ..autograd import Tensor
from ..backend_ndarray import NDArray, as_device, device_of, resolve_dtype


def _shape(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


def _tensor(host_or_array, device, dtype, requires_grad):
    """A constant Tensor of a host numpy array (moved to ``device``) or of a device's NDArray."""
    device = as_device(device)
    if isinstance(host_or_array, numpy.ndarray):
        host_or_array = NDArray.wrap(device.from_host(host_or_array, dtype), device)
    return Tensor.make_const(host_or_array, requires_grad=requires_grad)


def rand(*shape, low=0.0, high=1.0, device=None, dtype="float32", requires_grad=False):
    """Uniform numbers in [low, high): ``numpy.random.rand(*shape) * (high - low) + low``.

    Example:
        >>> import numpy as np, needle as ndl
        >>> np.random.seed(0)
        >>> [round(v, 4) for v in ndl.init.rand(2, low=-1, high=1).numpy().tolist()]
        [0.0976, 0.4304]
    """
    shape = _shape(shape)
    return _tensor(numpy.random.rand(*shape) * (high - low) + low, device, dtype, requires_grad)


def randn(*shape, mean=0.0, std=1.0, device=None, dtype="float32", requires_grad=False):
    """Normal numbers: ``numpy.random.randn(*shape) * std + mean``."""
    shape = _shape(shape)
    return _tensor(numpy.random.randn(*shape) * std + mean, device, dtype, requires_grad)


def constant(*shape, c=1.0, device=None, dtype="float32", requires_grad=False):
    """A tensor of ``shape`` filled with ``c``."""
    device = as_device(device)
    return _tensor(device.full(_shape(shape), c, dtype), device, dtype, requires_grad)


def ones(*shape, device=None, dtype="float32", requires_grad=False):
    """A tensor of ones."""
    return constant(*shape, c=1.0, device=device, dtype=dtype, requires_grad=requires_grad)


def zeros(*shape, device=None, dtype="float32", requires_grad=False):
    """A tensor of zeros."""
    return constant(*shape, c=0.0, device=device, dtype=dtype, requires_grad=requires_grad)


def randb(*shape, p=0.5, device=None, dtype="bool", requires_grad=False):
    """Booleans that are True with probability ``p``: ``numpy.random.rand(*shape) <= p``."""
    shape = _shape(shape)
    return _tensor(numpy.random.rand(*shape) <= p, device, dtype, requires_grad)


def one_hot(n, i, device=None, dtype="float32", requires_grad=False):
    """Rows of the n-by-n identity picked by the integer labels ``i`` (a Tensor or an array).

    Float labels must be whole numbers (3.0 picks row 3); a fractional or NaN label raises
    ValueError naming it, where the course's ``numpy.eye(n)[i]`` would truncate or fail.

    Example:
        >>> import needle as ndl
        >>> ndl.init.one_hot(3, ndl.Tensor([2, 0], dtype="int64")).numpy().tolist()
        [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    """
    if isinstance(i, Tensor):
        device = i.device if device is None else as_device(device)
        labels = i.realize_cached_data().raw
    else:
        device = as_device(device)
        labels = i.raw if isinstance(i, NDArray) else i if hasattr(i, "dtype") else numpy.asarray(i)
    return _tensor(device.one_hot(n, device.xp.asanyarray(labels), dtype=resolve_dtype(dtype)), device, dtype, requires_grad)


def zeros_like(array, *, device=None, requires_grad=False):
    """Zeros with the shape, dtype and (unless given) device of ``array``."""
    device = device or device_of(array)
    return zeros(*array.shape, dtype=array.dtype, device=device, requires_grad=requires_grad)


def ones_like(array, *, device=None, requires_grad=False):
    """Ones with the shape, dtype and (unless given) device of ``array``."""
    device = device or device_of(array)
    return ones(*array.shape, dtype=array.dtype, device=device, requires_grad=requires_grad)
