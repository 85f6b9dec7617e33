"""The course's module path ``needle.data.data_basic``: ``Dataset`` and ``DataLoader``.

They are defined in :mod:`needle.data.dataset` and :mod:`needle.data.dataloader`.
"""
from .dataloader import DataLoader
from .dataset import Dataset

__all__ = ["DataLoader", "Dataset"]
