"""The course's package ``needle.data.datasets``: one module per dataset, as the course lays it out.

Add a dataset with one module here and one import line below.
"""
from .mnist_dataset import MNISTDataset, parse_mnist  # noqa: F401
from .ndarray_dataset import NDArrayDataset  # noqa: F401
from .ptb_dataset import Corpus, Dictionary, batchify, get_batch  # noqa: F401
from .cifar10_dataset import CIFAR10Dataset  # noqa: F401
