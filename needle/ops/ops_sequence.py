"""Recurrent ops: one LSTM step as a single node (``lstm_cell``) and an embedding lookup (``embedding``).

An LSTM step built from element-wise ops costs about twenty nodes, four of them slicing the
gates apart (and every slice's gradient is a full-size array). As one node it is the numpy
step: two matrix products, the four activations, and a backward pass written out.
"""
import numpy

from ..autograd import TensorOp, TensorTupleOp, Value
from ..backend_ndarray import NDArray


def _sigmoid(raw, xp):
    # NOTE: 0.5 * (1 + tanh(a / 2)) is the logistic function and never overflows.
    return 0.5 * (1 + xp.tanh(raw * 0.5))


class LSTMCellOp(TensorTupleOp):
    """One LSTM step: ``(x, h, c, W_ih, W_hh[, bias]) -> (h_next, c_next)``, gates in PyTorch's order (i, f, g, o).

    ``gates = x @ W_ih + h @ W_hh + bias``; ``c_next = f * c + i * g``; ``h_next = o * tanh(c_next)``,
    with i, f, o through the logistic function and g through tanh. The activations are kept on
    the op (one op per step) for the backward pass.
    """

    def compute(self, x: NDArray, h: NDArray, c: NDArray, weight_ih: NDArray, weight_hh: NDArray, bias=None):
        hidden = h.shape[-1]
        if weight_ih.shape != (x.shape[-1], 4 * hidden) or weight_hh.shape != (hidden, 4 * hidden):
            raise ValueError(
                f"LSTMCellOp: input {x.shape} and hidden {h.shape} need W_ih of shape "
                f"({x.shape[-1]}, {4 * hidden}) and W_hh of shape ({hidden}, {4 * hidden}), "
                f"got {weight_ih.shape} and {weight_hh.shape}"
            )
        xp = x.device.xp
        gates = x.raw @ weight_ih.raw
        gates += h.raw @ weight_hh.raw
        if bias is not None:
            gates += bias.raw.reshape(-1)
        activated = _sigmoid(gates, xp)
        activated[:, 2 * hidden : 3 * hidden] = xp.tanh(gates[:, 2 * hidden : 3 * hidden])
        i, f, g, o = (activated[:, k * hidden : (k + 1) * hidden] for k in range(4))
        c_next = f * c.raw + i * g
        tanh_c = xp.tanh(c_next)
        self.activated, self.tanh_c = activated, tanh_c
        device = x.device
        return NDArray.make(o * tanh_c, device), NDArray.make(c_next, device)

    def gradient(self, out_grad, node):
        inputs = node.inputs
        grads = LSTMCellBackward(self, [x.requires_grad for x in inputs])(out_grad[0], out_grad[1], *inputs)
        return tuple(grads[k] for k in range(len(inputs)))

    def gradient_data(self, out_grad, node):
        needed = [x.requires_grad for x in node.inputs]
        arrays = [x.cached_data for x in node.inputs]
        return _lstm_cell_backward(self, out_grad[0], out_grad[1], arrays, needed)


def _lstm_cell_backward(forward, grad_h, grad_c, inputs, needed):
    """The adjoints of ``(x, h, c, W_ih, W_hh[, bias])`` given those of ``(h_next, c_next)``; None where not needed."""
    x, h, c, weight_ih, weight_hh = inputs[:5]
    hidden = h.shape[-1]
    activated, tanh_c = forward.activated, forward.tanh_c
    i, f, g, o = (activated[:, k * hidden : (k + 1) * hidden] for k in range(4))
    grad_h = grad_h.raw
    grad_c_total = grad_c.raw + grad_h * o * (1 - tanh_c * tanh_c)
    grad_gates = activated.copy()  # the pre-activation adjoints, gate by gate
    grad_gates[:, :hidden] = grad_c_total * g * i * (1 - i)
    grad_gates[:, hidden : 2 * hidden] = grad_c_total * c.raw * f * (1 - f)
    grad_gates[:, 2 * hidden : 3 * hidden] = grad_c_total * i * (1 - g * g)
    grad_gates[:, 3 * hidden :] = grad_h * tanh_c * o * (1 - o)
    device = h.device
    products = [
        lambda: grad_gates @ weight_ih.raw.T,
        lambda: grad_gates @ weight_hh.raw.T,
        lambda: grad_c_total * f,
        lambda: x.raw.T @ grad_gates,
        lambda: h.raw.T @ grad_gates,
        lambda: grad_gates.sum(axis=0).reshape(inputs[5].shape),
    ]
    return tuple(NDArray.make(make(), device) if want else None for make, want in zip(products, needed))


class LSTMCellBackward(TensorTupleOp):
    """LSTMCellOp's adjoints as a node: ``(grad_h, grad_c, *forward inputs) -> adjoint of each forward input``.

    Inputs that needed no gradient get zeros. Its own gradient (second order) is not provided.
    """

    def __init__(self, forward: LSTMCellOp, needed):
        self.forward = forward
        self.needed = needed

    def compute(self, grad_h, grad_c, *inputs):
        grads = _lstm_cell_backward(self.forward, grad_h, grad_c, inputs, self.needed)
        xp = grad_h.device.xp
        return tuple(
            NDArray.make(xp.zeros(x.shape, dtype=x.dtype), x.device) if grad is None else grad
            for grad, x in zip(grads, inputs)
        )

    def gradient(self, out_grad, node):
        raise NotImplementedError(
            "second-order gradients through nn.LSTM / nn.LSTMCell are not implemented: the LSTM step "
            "is one fused node; use backward(create_graph=False) or differentiate the cell's ops yourself"
        )


def lstm_cell(x, h, c, weight_ih, weight_hh, bias=None):
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


class EmbeddingLookup(TensorOp):
    """Rows of ``weight`` (num_embeddings, dim) picked by the integer ``indices`` (any shape): ``weight[indices]``.

    Equal to the course's ``one_hot(indices) @ weight`` without the one-hot matrix; the gradient
    adds each output row's adjoint into its row of the weight.
    """

    def __init__(self, indices: NDArray):
        self.indices = indices

    def compute(self, weight: NDArray):
        return NDArray.make(weight.raw[self.indices.raw], weight.device)

    def gradient(self, out_grad, node):
        return EmbeddingGradient(self.indices, node.inputs[0].shape)(out_grad)

    def gradient_data(self, out_grad, node):
        return (_scatter_rows(out_grad, self.indices, node.inputs[0].cached_data.shape),)


class EmbeddingGradient(TensorOp):
    """EmbeddingLookup's adjoint: ``out_grad`` rows summed into a (num_embeddings, dim) array; linear, so its own gradient is the lookup."""

    def __init__(self, indices: NDArray, weight_shape):
        self.indices = indices
        self.weight_shape = tuple(weight_shape)

    def compute(self, out_grad: NDArray):
        return _scatter_rows(out_grad, self.indices, self.weight_shape)

    def gradient(self, adjoint, node):
        return EmbeddingLookup(self.indices)(adjoint)


def _scatter_rows(out_grad, indices, weight_shape):
    xp = out_grad.device.xp
    grad = xp.zeros(weight_shape, dtype=out_grad.dtype)
    rows, values = indices.raw.reshape(-1), out_grad.raw.reshape(-1, weight_shape[-1])
    # NOTE: a scatter-add sums repeated indices (a word seen twice gets both adjoints); += would keep one.
    if xp is numpy:
        numpy.add.at(grad, rows, values)
    else:
        import cupyx

        cupyx.scatter_add(grad, rows, values)
    return NDArray.make(grad, out_grad.device)


def embedding(indices, weight):
    """``weight[indices]``: the rows of ``weight`` for integer ``indices`` (a Tensor or NDArray), as one node.

    Example:
        >>> import needle as ndl
        >>> weight = ndl.Tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])
        >>> ndl.ops.embedding(ndl.Tensor([[2], [0]], dtype="int64"), weight).numpy().tolist()
        [[[4.0, 5.0]], [[0.0, 1.0]]]
    """
    if isinstance(indices, Value):
        indices = indices.realize_cached_data()
    raw = indices.raw
    if raw.dtype.kind not in "iu":
        # NOTE: the course's batches hold word indices as floats; they are exact integers.
        indices = NDArray.make(raw.astype("int64"), indices.device)
    return EmbeddingLookup(indices)(weight)
