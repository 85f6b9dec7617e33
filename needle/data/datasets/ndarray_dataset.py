"""The course's module path ``needle.data.datasets.ndarray_dataset``: ``NDArrayDataset``.

It is defined in :mod:`needle.data.dataset`.
"""
from ..dataset import NDArrayDataset

__all__ = ["NDArrayDataset"]
