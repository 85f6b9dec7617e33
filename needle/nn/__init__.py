"""Neural-network modules: the course's ``needle.nn`` (Module, Parameter, layers, losses)."""
from .nn_basic import *  # noqa: F401,F403
from .nn_basic import __all__
from .nn_sequence import LSTM, Embedding, LSTMCell, RNN, RNNCell  # noqa: F401,E402
from .nn_conv import Conv  # noqa: F401

__all__ = [*__all__, "Conv"]
