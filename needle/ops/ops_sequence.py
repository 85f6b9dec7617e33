"""Recurrent ops: an LSTM step (``lstm_cell``) and a whole LSTM or RNN layer (``lstm_layer``,
``rnn_layer``) as one node each.

An LSTM step built from element-wise ops costs about twenty nodes, four of them slicing the
gates apart (and every slice's gradient is a full-size array). As one node it is the numpy
step: the matrix products, the four activations, and a backward pass written out. A layer as
one node also projects the whole input sequence in one product and never slices a sequence
into steps in the graph (``split`` then one ``tuple_get_item`` per step is a node per step).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..autograd import TensorTuple, TensorTupleOp
from ..backend_ndarray import NDArray
from ..backend_ndarray.products import matmul

if TYPE_CHECKING:
    from ..tensor import Tensor


def _activate_gates(gates, c_prev, xp):
    """Gate activations in place (i, f, o logistic, g tanh) and the next state: returns (activated, c_next, tanh_c, h_next)."""
    hidden = c_prev.shape[-1]
    candidate = xp.tanh(gates[:, 2 * hidden : 3 * hidden])
    # NOTE: 0.5 * (1 + tanh(a / 2)) is the logistic function and never overflows.
    xp.multiply(gates, 0.5, out=gates)
    xp.tanh(gates, out=gates)
    gates += 1
    gates *= 0.5
    activated = gates
    activated[:, 2 * hidden : 3 * hidden] = candidate
    i, f, o = activated[:, :hidden], activated[:, hidden : 2 * hidden], activated[:, 3 * hidden :]
    c_next = f * c_prev + i * candidate
    tanh_c = xp.tanh(c_next)
    return activated, c_next, tanh_c, o * tanh_c


def _gate_adjoints(activated, tanh_c, c_prev, grad_h, grad_c, out):
    """Write the adjoints of the four pre-activations into ``out``; returns the adjoint of c_prev."""
    hidden = c_prev.shape[-1]
    i, f, g, o = (activated[:, k * hidden : (k + 1) * hidden] for k in range(4))
    grad_c = grad_c + grad_h * o * (1 - tanh_c * tanh_c)
    out[:, :hidden] = grad_c * g * i * (1 - i)
    out[:, hidden : 2 * hidden] = grad_c * c_prev * f * (1 - f)
    out[:, 2 * hidden : 3 * hidden] = grad_c * i * (1 - g * g)
    out[:, 3 * hidden :] = grad_h * tanh_c * o * (1 - o)
    return grad_c * f


class _FusedOp(TensorTupleOp):
    """A TensorTuple op whose backward is written out in array code (``input_adjoints``).

    ``gradient`` (the graph path) returns the outputs of one :class:`FusedBackward` node.
    """

    def input_adjoints(self, out_grads, inputs, needed):
        """Adjoint arrays of every input (None where ``needed`` is False) from the outputs' adjoints."""
        raise NotImplementedError()

    def gradient(self, out_grad, node):
        inputs = node.inputs
        grads = [out_grad[k] for k in range(len(node.cached_data))]
        adjoints = FusedBackward(self, [x.requires_grad for x in inputs], len(grads))(*grads, *inputs)
        return tuple(adjoints[k] for k in range(len(inputs)))

    def gradient_data(self, out_grad, node):
        arrays = [x.cached_data for x in node.inputs]
        return self.input_adjoints(out_grad, arrays, [x.requires_grad for x in node.inputs])


class FusedBackward(TensorTupleOp):
    """A fused op's adjoints as a node: ``(*output adjoints, *forward inputs) -> adjoint of each forward input``.

    Inputs that need no gradient get zeros. Its own gradient (second order) is not provided.
    """

    def __init__(self, forward: _FusedOp, needed, num_outputs: int):
        self.forward, self.needed, self.num_outputs = forward, needed, num_outputs

    def compute(self, *arrays):
        out_grads, inputs = arrays[: self.num_outputs], arrays[self.num_outputs :]
        grads = self.forward.input_adjoints(out_grads, inputs, self.needed)
        return tuple(
            NDArray.wrap(x.device.xp.zeros(x.shape, dtype=x.dtype), x.device) if grad is None else grad
            for grad, x in zip(grads, inputs)
        )

    def gradient(self, out_grad, node):
        raise NotImplementedError(
            f"second-order gradients through {type(self.forward).__name__} (nn.RNN, nn.LSTM, nn.LSTMCell) are not "
            "implemented: its backward is one fused node; use backward(create_graph=False), or build the "
            "cell from element-wise ops to differentiate twice"
        )


def _check_lstm_weights(name, input_size, hidden, weight_ih, weight_hh):
    if weight_ih.shape != (input_size, 4 * hidden) or weight_hh.shape != (hidden, 4 * hidden):
        raise ValueError(
            f"{name}: input size {input_size} and hidden size {hidden} need W_ih of shape "
            f"({input_size}, {4 * hidden}) and W_hh of shape ({hidden}, {4 * hidden}), "
            f"got {weight_ih.shape} and {weight_hh.shape}"
        )


class LSTMCellOp(_FusedOp):
    """One LSTM step: ``(x, h, c, W_ih, W_hh[, bias]) -> (h_next, c_next)``, gates in PyTorch's order (i, f, g, o).

    ``gates = x @ W_ih + h @ W_hh + bias``; ``c_next = f * c + i * g``; ``h_next = o * tanh(c_next)``,
    with i, f, o through the logistic function and g through tanh. The activations are saved on
    the op (one op per step) for the backward pass.
    """

    def compute(self, x: NDArray, h: NDArray, c: NDArray, weight_ih: NDArray, weight_hh: NDArray, bias=None):
        _check_lstm_weights("LSTMCellOp", x.shape[-1], h.shape[-1], weight_ih, weight_hh)
        gates = matmul(x.raw, weight_ih.raw)
        gates += matmul(h.raw, weight_hh.raw)
        if bias is not None:
            gates += bias.raw.reshape(-1)
        activated, c_next, tanh_c, h_next = _activate_gates(gates, c.raw, x.device.xp)
        device = x.device
        self.save_for_backward(NDArray.wrap(activated, device), NDArray.wrap(tanh_c, device))
        return NDArray.wrap(h_next, device), NDArray.wrap(c_next, device)

    def input_adjoints(self, out_grads, inputs, needed):
        x, h, c, weight_ih, weight_hh = inputs[:5]
        activated, tanh_c = (array.raw for array in self.saved_arrays)
        grad_gates = x.device.xp.empty_like(activated)
        grad_c = _gate_adjoints(activated, tanh_c, c.raw, out_grads[0].raw, out_grads[1].raw, grad_gates)
        products = [
            lambda: matmul(grad_gates, weight_ih.raw.T),
            lambda: matmul(grad_gates, weight_hh.raw.T),
            lambda: grad_c,
            lambda: matmul(x.raw.T, grad_gates),
            lambda: matmul(h.raw.T, grad_gates),
            lambda: grad_gates.sum(axis=0).reshape(inputs[5].shape),
        ]
        device = h.device
        return tuple(NDArray.wrap(make(), device) if want else None for make, want in zip(products, needed))


def lstm_cell(
    x: Tensor, h: Tensor, c: Tensor, weight_ih: Tensor, weight_hh: Tensor, bias: Tensor | None = None
) -> TensorTuple:
    """One LSTM step as one node; returns the TensorTuple ``(h_next, c_next)``.

    Args:
        x: input (batch, input_size); h, c: state (batch, hidden_size).
        weight_ih: (input_size, 4 * hidden_size); weight_hh: (hidden_size, 4 * hidden_size),
            columns in PyTorch's gate order i, f, g, o; bias: (4 * hidden_size,) or None.

    Example:
        >>> import needle as ndl
        >>> zeros = ndl.init.zeros(1, 2)
        >>> h, c = ndl.ops.lstm_cell(ndl.init.ones(1, 3), zeros, zeros, ndl.init.zeros(3, 8), ndl.init.zeros(2, 8))
        >>> h.numpy().tolist(), c.numpy().tolist()  # every gate 0.5 and g = 0: nothing stored
        ([[0.0, 0.0]], [[0.0, 0.0]])
    """
    if bias is None:
        return LSTMCellOp()(x, h, c, weight_ih, weight_hh)
    return LSTMCellOp()(x, h, c, weight_ih, weight_hh, bias)


class LSTMLayerOp(_FusedOp):
    """One LSTM layer over a sequence: ``(X, h0, c0, W_ih, W_hh[, bias]) -> (output, h_n, c_n)``.

    X is (seq_len, batch, input_size), h0 and c0 (batch, hidden); output (seq_len, batch, hidden)
    holds h at every step. The input projection of the whole sequence is one matrix product,
    then each step costs one product with W_hh; the backward pass is BPTT in array code, with
    one product each for the adjoints of X, W_ih and W_hh over the whole sequence.
    """

    def compute(self, X: NDArray, h0: NDArray, c0: NDArray, weight_ih: NDArray, weight_hh: NDArray, bias=None):
        steps, batch, input_size = X.shape
        hidden = h0.shape[-1]
        _check_lstm_weights("LSTMLayerOp", input_size, hidden, weight_ih, weight_hh)
        xp = X.device.xp
        projected = matmul(X.raw.reshape(steps * batch, input_size), weight_ih.raw)
        if bias is not None:
            projected += bias.raw.reshape(-1)
        projected = projected.reshape(steps, batch, 4 * hidden)
        output = xp.empty((steps, batch, hidden), dtype=projected.dtype)
        cells = xp.empty_like(output)
        tanh_cells = xp.empty_like(output)
        h, c, w_hh = h0.raw, c0.raw, weight_hh.raw
        for t in range(steps):
            gates = projected[t]
            gates += matmul(h, w_hh)
            _, cells[t], tanh_cells[t], output[t] = _activate_gates(gates, c, xp)
            h, c = output[t], cells[t]
        # NOTE: ``projected`` now holds the activated gates, which the backward pass needs.
        device = X.device
        self.save_for_backward(*(NDArray.wrap(array, device) for array in (projected, cells, tanh_cells, output)))
        return NDArray.wrap(output, device), NDArray.wrap(h.copy(), device), NDArray.wrap(c.copy(), device)

    def input_adjoints(self, out_grads, inputs, needed):
        X, h0, c0, weight_ih, weight_hh = inputs[:5]
        xp = X.device.xp
        steps, batch, input_size = X.shape
        hidden = h0.shape[-1]
        grad_output = out_grads[0].raw
        grad_h, grad_c = out_grads[1].raw, out_grads[2].raw
        activated, cells, tanh_cells, output = (array.raw for array in self.saved_arrays)
        grad_gates = xp.empty_like(activated)
        w_hh_t = weight_hh.raw.T
        for t in reversed(range(steps)):
            grad_h = grad_h + grad_output[t]
            c_prev = cells[t - 1] if t > 0 else c0.raw
            grad_c = _gate_adjoints(activated[t], tanh_cells[t], c_prev, grad_h, grad_c, grad_gates[t])
            grad_h = matmul(grad_gates[t], w_hh_t)
        flat_grads = grad_gates.reshape(steps * batch, 4 * hidden)

        def grad_weight_hh():
            previous = xp.concatenate([h0.raw[None], output[:-1]]).reshape(steps * batch, hidden)
            return matmul(previous.T, flat_grads)

        products = [
            lambda: matmul(flat_grads, weight_ih.raw.T).reshape(X.shape),
            lambda: grad_h,
            lambda: grad_c,
            lambda: matmul(X.raw.reshape(steps * batch, input_size).T, flat_grads),
            grad_weight_hh,
            lambda: flat_grads.sum(axis=0).reshape(inputs[5].shape),
        ]
        device = X.device
        return tuple(NDArray.wrap(make(), device) if want else None for make, want in zip(products, needed))


def lstm_layer(
    X: Tensor, h0: Tensor, c0: Tensor, weight_ih: Tensor, weight_hh: Tensor, bias: Tensor | None = None
) -> TensorTuple:
    """One LSTM layer over a whole sequence as one node; returns the TensorTuple ``(output, h_n, c_n)``.

    Args:
        X: (seq_len, batch, input_size); h0, c0: (batch, hidden_size).
        weight_ih, weight_hh, bias: as for :func:`lstm_cell`.

    Example:
        >>> import needle as ndl
        >>> zeros = ndl.init.zeros(2, 4)
        >>> output, h_n, c_n = ndl.ops.lstm_layer(ndl.init.ones(5, 2, 3), zeros, zeros, ndl.init.ones(3, 16), ndl.init.ones(4, 16))
        >>> output.shape, h_n.shape, c_n.shape
        ((5, 2, 4), (2, 4), (2, 4))
    """
    if bias is None:
        return LSTMLayerOp()(X, h0, c0, weight_ih, weight_hh)
    return LSTMLayerOp()(X, h0, c0, weight_ih, weight_hh, bias)


class RNNLayerOp(_FusedOp):
    """One Elman RNN layer over a sequence: ``(X, h0, W_ih, W_hh[, bias]) -> (output, h_n)``.

    ``h_t = act(x_t @ W_ih + h_{t-1} @ W_hh + bias)`` with act tanh or ReLU; X is (seq_len,
    batch, input_size), h0 (batch, hidden), output (seq_len, batch, hidden). The input
    projection is one product for the whole sequence; the backward pass is BPTT in array code.
    """

    def __init__(self, nonlinearity: str = "tanh"):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNNLayerOp nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.nonlinearity = nonlinearity

    def compute(self, X: NDArray, h0: NDArray, weight_ih: NDArray, weight_hh: NDArray, bias=None):
        steps, batch, input_size = X.shape
        hidden = h0.shape[-1]
        if weight_ih.shape != (input_size, hidden) or weight_hh.shape != (hidden, hidden):
            raise ValueError(
                f"RNNLayerOp: input size {input_size} and hidden size {hidden} need W_ih of shape "
                f"({input_size}, {hidden}) and W_hh of shape ({hidden}, {hidden}), got {weight_ih.shape} and {weight_hh.shape}"
            )
        xp = X.device.xp
        output = matmul(X.raw.reshape(steps * batch, input_size), weight_ih.raw)
        if bias is not None:
            output += bias.raw.reshape(-1)
        output = output.reshape(steps, batch, hidden)
        h, w_hh = h0.raw, weight_hh.raw
        for t in range(steps):
            pre_activation = output[t]
            pre_activation += matmul(h, w_hh)
            if self.nonlinearity == "tanh":
                xp.tanh(pre_activation, out=pre_activation)
            else:
                xp.maximum(pre_activation, 0, out=pre_activation)
            h = pre_activation
        output = NDArray.wrap(output, X.device)
        self.save_for_backward(output)
        return output, NDArray.wrap(h.copy(), X.device)

    def input_adjoints(self, out_grads, inputs, needed):
        X, h0, weight_ih, weight_hh = inputs[:4]
        xp = X.device.xp
        steps, batch, input_size = X.shape
        hidden = h0.shape[-1]
        output, grad_output = self.saved_arrays[0].raw, out_grads[0].raw
        grad_pre = xp.empty_like(output)
        grad_h, w_hh_t = out_grads[1].raw, weight_hh.raw.T
        for t in reversed(range(steps)):
            grad_h = grad_h + grad_output[t]
            # NOTE: tanh' = 1 - h^2; ReLU's gradient is 0 at the kink, as PyTorch's.
            derivative = 1 - output[t] * output[t] if self.nonlinearity == "tanh" else output[t] > 0
            xp.multiply(grad_h, derivative, out=grad_pre[t])
            grad_h = matmul(grad_pre[t], w_hh_t)
        flat_grads = grad_pre.reshape(steps * batch, hidden)

        def grad_weight_hh():
            previous = xp.concatenate([h0.raw[None], output[:-1]]).reshape(steps * batch, hidden)
            return matmul(previous.T, flat_grads)

        products = [
            lambda: matmul(flat_grads, weight_ih.raw.T).reshape(X.shape),
            lambda: grad_h,
            lambda: matmul(X.raw.reshape(steps * batch, input_size).T, flat_grads),
            grad_weight_hh,
            lambda: flat_grads.sum(axis=0).reshape(inputs[4].shape),
        ]
        device = X.device
        return tuple(NDArray.wrap(make(), device) if want else None for make, want in zip(products, needed))


def rnn_layer(
    X: Tensor,
    h0: Tensor,
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias: Tensor | None = None,
    nonlinearity: str = "tanh",
) -> TensorTuple:
    """One RNN layer over a whole sequence as one node; returns the TensorTuple ``(output, h_n)``.

    Args:
        X: (seq_len, batch, input_size); h0: (batch, hidden_size).
        weight_ih: (input_size, hidden_size); weight_hh: (hidden_size, hidden_size);
        bias: (hidden_size,) or None (an RNN's bias_ih + bias_hh); nonlinearity: 'tanh' or 'relu'.

    Example:
        >>> import needle as ndl
        >>> output, h_n = ndl.ops.rnn_layer(ndl.init.ones(5, 2, 3), ndl.init.zeros(2, 4), ndl.init.ones(3, 4), ndl.init.ones(4, 4))
        >>> output.shape, h_n.shape
        ((5, 2, 4), (2, 4))
    """
    op = RNNLayerOp(nonlinearity)
    return op(X, h0, weight_ih, weight_hh) if bias is None else op(X, h0, weight_ih, weight_hh, bias)
