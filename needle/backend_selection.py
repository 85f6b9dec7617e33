"""The course's backend switch: ``NEEDLE_BACKEND``, read once when needle is imported.

- ``nd`` (the default): needle's NDArray over devices, float32 by default: a Tensor made from
  Python numbers, lists or a float64 array is float32 unless ``dtype=`` says otherwise.
- ``np``: the course's numpy backend's dtypes: a Tensor keeps the dtype numpy infers (float64
  from float64 arrays, Python floats and lists of floats; int64 from lists of ints).

Only the default dtype differs, and with it what ``backward()`` of an integer tensor does
(:func:`integer_gradients`: an error under ``nd``, integer-valued gradients under ``np``, as the
course's numpy backend computes them). Under both, a Tensor's data is needle's NDArray (``array_api`` is
:mod:`needle.backend_ndarray`), so every op, device, optimizer and the course's NDArray
internals work the same. :func:`default_dtype` is the one place that decides it; the Tensor
constructor asks it.

Example:
    >>> import numpy as np, needle as ndl
    >>> from needle import backend_selection
    >>> backend_selection.BACKEND in ("nd", "np")
    True
    >>> with backend_selection.use_backend("np"):
    ...     ndl.Tensor([1.5]).dtype, ndl.Tensor([1, 2]).dtype
    (dtype('float64'), dtype('int64'))
    >>> with backend_selection.use_backend("nd"):
    ...     ndl.Tensor([1.5]).dtype, ndl.Tensor(np.zeros(2)).dtype
    (dtype('float32'), dtype('float32'))
"""
import contextlib
import os
from typing import Iterator, Optional

import numpy

from . import backend_ndarray as array_api  # noqa: F401  (the course's name for the array module)
from .backend_ndarray import (  # noqa: F401  (the course's names, re-exported)
    BackendDevice as Device,
    NDArray,
    all_devices,
    cpu,
    cpu_numpy,
    cuda,
    default_device,
)

BACKENDS = ("nd", "np")

_FLOAT32 = numpy.dtype("float32")
_FLOAT64 = numpy.dtype("float64")


def _checked(name: str) -> str:
    if name not in BACKENDS:
        raise RuntimeError(
            f"unknown needle backend NEEDLE_BACKEND={name!r}: use 'nd' (needle's NDArray, float32 "
            "by default) or 'np' (the course's numpy backend: numpy's inferred dtypes)"
        )
    return name


BACKEND = _checked(os.environ.get("NEEDLE_BACKEND", "nd"))
"""The active backend, ``"nd"`` or ``"np"``."""


def default_dtype(data) -> Optional[numpy.dtype]:
    """The dtype a Tensor made from ``data`` without ``dtype=`` gets under the active backend.

    Returns None where numpy's own inference decides (Python numbers and lists under ``np``).
    """
    dtype = getattr(data, "dtype", None)
    if BACKEND == "np":
        return dtype
    if dtype is None or dtype == _FLOAT64:
        return _FLOAT32
    return dtype


def integer_gradients(dtype: numpy.dtype) -> bool:
    """Whether ``backward()`` takes a tensor of integer ``dtype``: under ``np`` only, as the course's.

    The course's Tensor([6]) is int64 under its numpy backend, and its backward() seeds integer
    ones, so every gradient of an integer graph is an integer tensor. Under ``nd`` integers mean
    labels and counts, and backward() on them is a mistake it reports.
    """
    return BACKEND == "np" and dtype.kind in "iu"


@contextlib.contextmanager
def use_backend(name: str) -> Iterator[str]:
    """Make ``name`` the active backend inside the block, then restore the previous one.

    For tests and notebooks that compare both backends; ``NEEDLE_BACKEND`` chooses it otherwise.
    """
    global BACKEND
    saved, BACKEND = BACKEND, _checked(name)
    try:
        yield name
    finally:
        BACKEND = saved
