"""Sequence modules, as the course lays them out: Sigmoid, RNNCell, RNN, LSTMCell, LSTM, Embedding.

Sequences are ``(seq_len, batch, features)``; a hidden state of ``None`` means zeros. Weights are
read from their attributes on every call, so replacing ``cell.W_ih`` takes effect at once. Every
forward checks its input and states first (``needle.nn.sequence_arguments``): a TypeError for the
wrong kind (a tuple given to an RNN, one Tensor to an LSTM), a ValueError naming the expected
shape for the wrong size, batch or number of layers, before anything is computed.
The layouts are the course's (``x @ W_ih``, W_ih of shape ``(input_size, hidden_size)``, the
transpose of PyTorch's ``weight_ih_l0``), and the LSTM's gates come in PyTorch's order i, f, g, o.
"""
import math
from typing import List, Optional, Tuple

from .. import init, ops
from ..autograd import Tensor, TensorTuple
from .layers import Sigmoid
from .module import Module, Parameter
from .sequence_arguments import check_pair_state, check_sequence_input, check_single_state, check_step_input

__all__ = ["Embedding", "LSTM", "LSTMCell", "RNN", "RNNCell", "Sigmoid"]

State = Tuple[Tensor, Tensor]


def _uniform(bound, *shape, device, dtype):
    return Parameter(init.rand(*shape, low=-bound, high=bound, device=device, dtype=dtype))


def _sum_of_biases(bias_ih, bias_hh):
    if bias_ih is None:
        return bias_hh
    return bias_ih if bias_hh is None else bias_ih + bias_hh


def _as_tuple(state):
    """A TensorTuple state (an op's output used as is) read as a plain tuple of its Tensors."""
    return state.tuple() if isinstance(state, TensorTuple) else state


def _zeros_state(X, hidden_size):
    """A zero state (batch, hidden_size) for one step's input X (batch, features)."""
    return init.zeros(X.shape[0], hidden_size, device=X.device, dtype=X.dtype)


class RNNCell(Module):
    """One step of an Elman RNN: ``h' = tanh(x @ W_ih + bias_ih + h @ W_hh + bias_hh)`` (or ReLU).

    Args:
        input_size: features of the input x.
        hidden_size: features of the hidden state h.
        bias: whether to add ``bias_ih`` and ``bias_hh``.
        nonlinearity: ``'tanh'`` or ``'relu'``.
        device, dtype: where and how the parameters are made.

    Every parameter is drawn from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)): W_ih
    (input_size, hidden_size), W_hh (hidden_size, hidden_size), then bias_ih and bias_hh
    (hidden_size,).

    Example:
        >>> import needle as ndl
        >>> cell = ndl.nn.RNNCell(3, 2)
        >>> cell(ndl.init.ones(4, 3)).shape  # h=None: a zero state
        (4, 2)
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        nonlinearity: str = "tanh",
        device=None,
        dtype: str = "float32",
    ):
        super().__init__()
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNNCell nonlinearity must be 'tanh' or 'relu', got nonlinearity={nonlinearity!r}")
        self.input_size, self.hidden_size, self.nonlinearity = input_size, hidden_size, nonlinearity
        bound = 1 / math.sqrt(hidden_size)
        self.W_ih = _uniform(bound, input_size, hidden_size, device=device, dtype=dtype)
        self.W_hh = _uniform(bound, hidden_size, hidden_size, device=device, dtype=dtype)
        self.bias_ih = _uniform(bound, hidden_size, device=device, dtype=dtype) if bias else None
        self.bias_hh = _uniform(bound, hidden_size, device=device, dtype=dtype) if bias else None

    def combined_bias(self) -> Optional[Tensor]:
        """``bias_ih + bias_hh`` (one node), or None without biases: a whole sequence adds it once."""
        return _sum_of_biases(self.bias_ih, self.bias_hh)

    def forward(self, X: Tensor, h: Optional[Tensor] = None) -> Tensor:
        """``X`` (batch, input_size), ``h`` (batch, hidden_size) or None; returns the next h."""
        batch = check_step_input(X, self.input_size, "RNNCell")
        if check_single_state(h, (batch, self.hidden_size), "RNNCell") is None:
            h = _zeros_state(X, self.hidden_size)
        pre_activation = ops.linear(X, self.W_ih, self.bias_ih) + ops.linear(h, self.W_hh, self.bias_hh)
        return ops.tanh(pre_activation) if self.nonlinearity == "tanh" else ops.relu(pre_activation)


class RNN(Module):
    """A stack of ``num_layers`` RNN layers over a sequence; ``rnn_cells[k]`` holds layer k's weights.

    ``forward(X, h0=None)`` takes X (seq_len, batch, input_size) and h0 (num_layers, batch,
    hidden_size) and returns ``(output, h_n)``: the last layer's h at every step (seq_len, batch,
    hidden_size) and every layer's last h (num_layers, batch, hidden_size).

    Example:
        >>> import needle as ndl
        >>> rnn = ndl.nn.RNN(3, 5, num_layers=2)
        >>> output, h_n = rnn(ndl.init.ones(7, 4, 3))
        >>> output.shape, h_n.shape, len(rnn.rnn_cells)
        ((7, 4, 5), (2, 4, 5), 2)
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        nonlinearity: str = "tanh",
        device=None,
        dtype: str = "float32",
    ):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"RNN needs num_layers >= 1, got num_layers={num_layers}")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.rnn_cells = [
            RNNCell(input_size if k == 0 else hidden_size, hidden_size, bias, nonlinearity, device, dtype)
            for k in range(num_layers)
        ]

    def forward(self, X: Tensor, h0: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        batch = check_sequence_input(X, self.input_size, "RNN")
        if check_single_state(h0, (self.num_layers, batch, self.hidden_size), "RNN", "h0") is None:
            initial = [init.zeros(batch, self.hidden_size, device=X.device, dtype=X.dtype)] * self.num_layers
        else:
            initial = list(ops.split(h0, 0)) if self.num_layers > 1 else [h0.reshape((batch, self.hidden_size))]
        last = []
        output = X
        for cell, h_first in zip(self.rnn_cells, initial):
            # NOTE: each layer is one node (ops.rnn_layer): the same math as cell(x, h) step by step,
            # with the whole sequence's input projection in one product.
            output, h_last = ops.rnn_layer(output, h_first, cell.W_ih, cell.W_hh, cell.combined_bias(), cell.nonlinearity)
            last.append(h_last)
        if self.num_layers == 1:
            return output, last[0].reshape((1, batch, self.hidden_size))
        return output, ops.stack(last, 0)


class LSTMCell(Module):
    """One LSTM step, gates in PyTorch's order (i, f, g, o), computed as one node per step.

    ``gates = x @ W_ih + bias_ih + h @ W_hh + bias_hh`` (one product per weight for all four
    gates); ``c' = f * c + i * g`` and ``h' = o * tanh(c')``.

    Args:
        input_size, hidden_size: features of x and of h (and c).
        bias: whether to add ``bias_ih`` and ``bias_hh``.
        device, dtype: where and how the parameters are made.

    Parameters, each from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)): W_ih (input_size,
    4 * hidden_size), W_hh (hidden_size, 4 * hidden_size), bias_ih and bias_hh (4 * hidden_size,).

    Example:
        >>> import needle as ndl
        >>> cell = ndl.nn.LSTMCell(3, 2)
        >>> h, c = cell(ndl.init.ones(4, 3))  # h=None: zero (h0, c0)
        >>> h.shape, c.shape, cell.W_hh.shape
        ((4, 2), (4, 2), (2, 8))
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype: str = "float32"):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        bound = 1 / math.sqrt(hidden_size)
        self.W_ih = _uniform(bound, input_size, 4 * hidden_size, device=device, dtype=dtype)
        self.W_hh = _uniform(bound, hidden_size, 4 * hidden_size, device=device, dtype=dtype)
        self.bias_ih = _uniform(bound, 4 * hidden_size, device=device, dtype=dtype) if bias else None
        self.bias_hh = _uniform(bound, 4 * hidden_size, device=device, dtype=dtype) if bias else None

    def combined_bias(self) -> Optional[Tensor]:
        """``bias_ih + bias_hh`` (one node), or None without biases: a whole sequence adds it once."""
        return _sum_of_biases(self.bias_ih, self.bias_hh)

    def forward(self, X: Tensor, h: Optional[State] = None) -> State:
        """``X`` (batch, input_size) and ``h = (h0, c0)`` or None; returns ``(h', c')``."""
        batch = check_step_input(X, self.input_size, "LSTMCell")
        state = check_pair_state(_as_tuple(h), (batch, self.hidden_size), "LSTMCell", names=("h", "c"))
        if state is None:
            state = (_zeros_state(X, self.hidden_size), _zeros_state(X, self.hidden_size))
        h_prev, c_prev = state
        h_next, c_next = ops.lstm_cell(X, h_prev, c_prev, self.W_ih, self.W_hh, self.combined_bias())
        return h_next, c_next


class LSTM(Module):
    """A stack of ``num_layers`` LSTM layers over a sequence; ``lstm_cells[k]`` holds layer k's weights.

    ``forward(X, h=None)`` takes X (seq_len, batch, input_size) and ``h = (h0, c0)``, each
    (num_layers, batch, hidden_size), and returns ``(output, (h_n, c_n))``: the last layer's h at
    every step, and every layer's last h and c.

    Example:
        >>> import needle as ndl
        >>> lstm = ndl.nn.LSTM(3, 5, num_layers=2)
        >>> output, (h_n, c_n) = lstm(ndl.init.ones(7, 4, 3))
        >>> output.shape, h_n.shape, c_n.shape
        ((7, 4, 5), (2, 4, 5), (2, 4, 5))
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        device=None,
        dtype: str = "float32",
    ):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"LSTM needs num_layers >= 1, got num_layers={num_layers}")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.lstm_cells = [
            LSTMCell(input_size if k == 0 else hidden_size, hidden_size, bias, device, dtype) for k in range(num_layers)
        ]

    def forward(self, X: Tensor, h: Optional[State] = None) -> Tuple[Tensor, State]:
        batch = check_sequence_input(X, self.input_size, "LSTM")
        state = check_pair_state(_as_tuple(h), (self.num_layers, batch, self.hidden_size), "LSTM")
        if state is None:
            zeros = init.zeros(batch, self.hidden_size, device=X.device, dtype=X.dtype)
            initial: List = [(zeros, zeros)] * self.num_layers
        else:
            h0, c0 = state
            initial = list(zip(ops.split(h0, 0), ops.split(c0, 0))) if self.num_layers > 1 else [
                (h0.reshape((batch, self.hidden_size)), c0.reshape((batch, self.hidden_size)))
            ]
        last_h, last_c = [], []
        output = X
        for cell, (h_first, c_first) in zip(self.lstm_cells, initial):
            # NOTE: each layer is one node (ops.lstm_layer): the same math as cell(x, state) step by
            # step, with the whole sequence's input projection in one product.
            output, h_last, c_last = ops.lstm_layer(output, h_first, c_first, cell.W_ih, cell.W_hh, cell.combined_bias())
            last_h.append(h_last)
            last_c.append(c_last)
        if self.num_layers == 1:
            shape = (1, batch, self.hidden_size)
            return output, (last_h[0].reshape(shape), last_c[0].reshape(shape))
        return output, (ops.stack(last_h, 0), ops.stack(last_c, 0))


class Embedding(Module):
    """A lookup table: integer indices (seq_len, batch) to vectors (seq_len, batch, embedding_dim).

    ``weight`` (num_embeddings, embedding_dim) is drawn from N(0, 1). The result equals the
    course's ``one_hot(x) @ weight`` but is one row lookup; the gradient adds each position's
    adjoint into its word's row (repeated words add up). Indices may be integer tensors or
    integer-valued floats (the course's batches); a fractional, NaN or infinite index is a
    ValueError naming it, one outside ``[0, num_embeddings)`` an IndexError.

    Example:
        >>> import needle as ndl
        >>> embed = ndl.nn.Embedding(10, 4)
        >>> embed(ndl.Tensor([[1, 2, 3]], dtype="float32")).shape
        (1, 3, 4)
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, device=None, dtype: str = "float32"):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Parameter(init.randn(num_embeddings, embedding_dim, device=device, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        # NOTE: ops.embedding checks the indices (whole numbers in [0, num_embeddings)) before the lookup.
        return ops.embedding(x, self.weight)
