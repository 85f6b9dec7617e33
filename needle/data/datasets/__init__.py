"""The course's package ``needle.data.datasets``: one module per dataset, as the course lays it out.

Add a dataset with one module here and one import line below.
"""
from .mnist_dataset import MNISTDataset, parse_mnist
from .ndarray_dataset import NDArrayDataset

__all__ = ["MNISTDataset", "NDArrayDataset", "parse_mnist"]
