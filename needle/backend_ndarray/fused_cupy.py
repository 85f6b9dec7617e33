"""The old name of :mod:`needle.backend_ndarray.kernels_cupy` (kept so that imports written
before the rename keep working); see :mod:`needle.backend_ndarray.fused`."""
from .kernels_cupy import CupyKernels  # noqa: F401

__all__ = ["CupyKernels"]
