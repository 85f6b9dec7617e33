"""The course's numpy device module, ``needle.backend_ndarray.ndarray_backend_numpy``.

The CPU device's functions over flat handles (see :mod:`needle.backend_ndarray.handles`), under
the names the course's module gives them: ``Array``, ``to_numpy``, ``from_numpy``, ``fill``,
``compact``, ``ewise_setitem``, ``scalar_setitem``, the ``ewise_*``/``scalar_*`` functions,
``matmul``, ``matmul_tiled``, ``reduce_max`` and ``reduce_sum``.

Example:
    >>> import numpy as np
    >>> from needle.backend_ndarray import ndarray_backend_numpy as backend
    >>> out = backend.Array(4)
    >>> backend.from_numpy(np.arange(4), out)
    >>> backend.to_numpy(out, (2, 2), (1, 2), 0).tolist()
    [[0.0, 2.0], [1.0, 3.0]]
"""
import numpy

from .device import cpu

_functions = cpu().mod

__device_name__ = "numpy"
__tile_size__ = _functions.__tile_size__
_datatype = numpy.float32
_datatype_size = numpy.dtype(_datatype).itemsize

Array = _functions.Array
to_numpy = _functions.to_numpy
from_numpy = _functions.from_numpy
fill = _functions.fill
compact = _functions.compact
ewise_setitem = _functions.ewise_setitem
scalar_setitem = _functions.scalar_setitem
ewise_add = _functions.ewise_add
scalar_add = _functions.scalar_add
ewise_mul = _functions.ewise_mul
scalar_mul = _functions.scalar_mul
ewise_div = _functions.ewise_div
scalar_div = _functions.scalar_div
scalar_power = _functions.scalar_power
ewise_maximum = _functions.ewise_maximum
scalar_maximum = _functions.scalar_maximum
ewise_eq = _functions.ewise_eq
scalar_eq = _functions.scalar_eq
ewise_ge = _functions.ewise_ge
scalar_ge = _functions.scalar_ge
ewise_log = _functions.ewise_log
ewise_exp = _functions.ewise_exp
ewise_tanh = _functions.ewise_tanh
matmul = _functions.matmul
matmul_tiled = _functions.matmul_tiled
reduce_max = _functions.reduce_max
reduce_sum = _functions.reduce_sum
