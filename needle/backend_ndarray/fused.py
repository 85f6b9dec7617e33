"""The old name of :mod:`needle.backend_ndarray.kernels`, the device kernels (kept so that
imports written before the rename keep working). In needle, "fused" names one thing: an op
that is one graph node for a chain of ops (:mod:`needle.ops.ops_fused`).

Example:
    >>> from needle.backend_ndarray import fused, kernels
    >>> fused.ArrayRoutines is kernels.ArrayRoutines
    True
"""
from .kernels import AdamScalars, ArrayRoutines, Scratch, SoftmaxCrossEntropySaved  # noqa: F401

__all__ = ["AdamScalars", "ArrayRoutines", "Scratch", "SoftmaxCrossEntropySaved"]
