"""The checks the sequence modules run on their inputs and states, before any computation.

Each forward of ``RNNCell``, ``LSTMCell``, ``RNN`` and ``LSTM`` passes its arguments through one
of the functions here: the input's shape, the state's kind (one tensor for an RNN, an ``(h, c)``
pair for an LSTM) and every state's shape against the layer's ``hidden_size``, the batch and,
for the stacks, ``num_layers``. A wrong state would otherwise pass the forward (the ops take
the hidden size from the state) and fail later, in the backward, with a raw matmul message.
"""
from typing import Optional, Tuple

from ..autograd import Tensor


def check_step_input(X, input_size: int, layer: str) -> int:
    """Check one step's input ``X`` (batch, input_size); returns the batch size."""
    _check_tensor(X, "X", layer)
    if X.ndim == 1 and X.shape[0] == input_size:
        raise ValueError(
            f"{layer}: X has shape {X.shape}, the batch axis is missing: a cell takes X of shape "
            f"(batch, {input_size}); for one sample use X.reshape((1, {input_size}))"
        )
    if X.ndim != 2 or X.shape[1] != input_size:
        raise ValueError(f"{layer}: X must have shape (batch, input_size) = (batch, {input_size}), got {X.shape}")
    return X.shape[0]


def check_sequence_input(X, input_size: int, layer: str) -> int:
    """Check a sequence ``X`` (seq_len, batch, input_size); returns the batch size."""
    _check_tensor(X, "X", layer)
    if X.ndim != 3 or X.shape[2] != input_size:
        raise ValueError(
            f"{layer} expects a sequence of shape (seq_len, batch, {input_size}), got {X.shape}: "
            "the time axis comes first (transpose a (batch, seq_len, features) input with X.transpose((0, 1)))"
        )
    return X.shape[1]


def check_single_state(h, shape: Tuple[int, ...], layer: str, what: str = "h") -> Optional[Tensor]:
    """``h`` (None or one Tensor of ``shape``) for an RNN layer; a pair is refused."""
    if h is None:
        return None
    if isinstance(h, (tuple, list)):
        raise TypeError(
            f"{layer}: {what} must be one Tensor of shape {shape}, got a {type(h).__name__} of {len(h)}: "
            "an (h, c) pair is an LSTM's state; an RNN keeps only h"
        )
    _check_state_shape(h, shape, layer, what)
    return h


def check_pair_state(state, shape: Tuple[int, ...], layer: str, names=("h0", "c0")) -> Optional[Tuple[Tensor, Tensor]]:
    """``state`` (None or an ``(h, c)`` pair of Tensors, each of ``shape``) for an LSTM layer."""
    if state is None:
        return None
    if not isinstance(state, (tuple, list)) or len(state) != 2:
        got = f"a {type(state).__name__} of {len(state)}" if isinstance(state, (tuple, list)) else type(state).__name__
        raise TypeError(
            f"{layer}: h must be a pair ({names[0]}, {names[1]}) of Tensors of shape {shape}, got {got}: "
            "an LSTM keeps a hidden state and a cell state: pass h=(h0, c0), e.g. c0 = ndl.init.zeros_like(h0)"
        )
    for tensor, what in zip(state, names):
        _check_state_shape(tensor, shape, layer, what)
    return state[0], state[1]


def _check_state_shape(state, shape, layer, what):
    _check_tensor(state, what, layer)
    if tuple(state.shape) != tuple(shape):
        axes = "(num_layers, batch, hidden_size)" if len(shape) == 3 else "(batch, hidden_size)"
        raise ValueError(f"{layer}: {what} must have shape {axes} = {shape}, got {state.shape}")


def _check_tensor(value, what, layer):
    if not isinstance(value, Tensor):
        raise TypeError(
            f"{layer}: {what} must be a needle Tensor, got {type(value).__name__}; "
            "make inputs with ndl.Tensor(array) and pass states returned by the layer"
        )
