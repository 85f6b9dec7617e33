"""The course's module name: every basic layer, re-exported from the files that define them."""
from .layers import Dropout, Flatten, Identity, Linear, ReLU, Residual, Sequential, Sigmoid, Tanh
from .loss import CrossEntropyLoss, SoftmaxLoss
from .module import Module, Parameter, StateDictError
from .normalization import BatchNorm1d, BatchNorm2d, LayerNorm1d

__all__ = [
    "BatchNorm1d",
    "BatchNorm2d",
    "CrossEntropyLoss",
    "Dropout",
    "Flatten",
    "Identity",
    "LayerNorm1d",
    "Linear",
    "Module",
    "Parameter",
    "ReLU",
    "Residual",
    "Sequential",
    "Sigmoid",
    "SoftmaxLoss",
    "StateDictError",
    "Tanh",
]
