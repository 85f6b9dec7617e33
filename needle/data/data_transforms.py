"""The course's module path ``needle.data.data_transforms``: the image transforms.

They are defined in :mod:`needle.data.transforms`.
"""
from .transforms import RandomCrop, RandomFlipHorizontal, Transform

__all__ = ["RandomCrop", "RandomFlipHorizontal", "Transform"]
