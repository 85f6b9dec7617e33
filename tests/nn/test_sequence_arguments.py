"""Sequence modules and Embedding refuse bad inputs and states in the forward, naming them, and change nothing."""
import numpy as np
import pytest

import needle as ndl
from needle import autograd, nn


def ones(*shape):
    return ndl.init.ones(*shape)


def zeros(*shape):
    return ndl.init.zeros(*shape)


def snapshot(module):
    return {name: value.copy() for name, value in module.state_dict().items()}


def assert_unchanged(module, before):
    after = module.state_dict()
    assert after.keys() == before.keys()
    for name, value in before.items():
        np.testing.assert_array_equal(after[name], value)


@pytest.mark.parametrize(
    "make, call, error, words",
    [
        pytest.param(
            lambda: nn.LSTMCell(3, 4), lambda cell: cell(ones(2, 3), (zeros(2, 4), zeros(2, 5))),
            ValueError, r"LSTMCell: c must have shape \(batch, hidden_size\) = \(2, 4\), got \(2, 5\)", id="lstm-cell-c-hidden",
        ),
        pytest.param(
            lambda: nn.LSTMCell(3, 4), lambda cell: cell(ones(2, 3), (zeros(2, 5), zeros(2, 4))),
            ValueError, r"LSTMCell: h must have shape .* = \(2, 4\), got \(2, 5\)", id="lstm-cell-h-hidden",
        ),
        pytest.param(
            lambda: nn.LSTMCell(3, 4), lambda cell: cell(ones(4, 3), (zeros(1, 4), zeros(1, 4))),
            ValueError, r"LSTMCell: h must have shape .* = \(4, 4\), got \(1, 4\)", id="lstm-cell-batch",
        ),
        pytest.param(
            lambda: nn.RNNCell(3, 4), lambda cell: cell(ones(4, 3), zeros(1, 4)),
            ValueError, r"RNNCell: h must have shape \(batch, hidden_size\) = \(4, 4\), got \(1, 4\)", id="rnn-cell-batch",
        ),
        pytest.param(
            lambda: nn.RNNCell(3, 4), lambda cell: cell(ones(4, 3), zeros(4, 5)),
            ValueError, r"RNNCell: h must have shape .* = \(4, 4\), got \(4, 5\)", id="rnn-cell-hidden",
        ),
        pytest.param(
            lambda: nn.RNN(3, 4), lambda rnn: rnn(ones(5, 4, 3), zeros(1, 1, 4)),
            ValueError, r"RNN: h0 must have shape \(num_layers, batch, hidden_size\) = \(1, 4, 4\), got \(1, 1, 4\)", id="rnn-batch",
        ),
        pytest.param(
            lambda: nn.RNN(3, 4, num_layers=2), lambda rnn: rnn(ones(5, 2, 3), zeros(1, 2, 4)),
            ValueError, r"RNN: h0 must have shape .* = \(2, 2, 4\), got \(1, 2, 4\)", id="rnn-num-layers",
        ),
        pytest.param(
            lambda: nn.LSTM(3, 4), lambda lstm: lstm(ones(5, 2, 3), (zeros(1, 2, 4), zeros(1, 2, 6))),
            ValueError, r"LSTM: c0 must have shape .* = \(1, 2, 4\), got \(1, 2, 6\)", id="lstm-c0-hidden",
        ),
        pytest.param(
            lambda: nn.LSTM(3, 4, num_layers=2), lambda lstm: lstm(ones(5, 2, 3), (zeros(2, 2, 4), zeros(1, 2, 4))),
            ValueError, r"LSTM: c0 must have shape .* = \(2, 2, 4\), got \(1, 2, 4\)", id="lstm-num-layers",
        ),
        pytest.param(
            lambda: nn.RNN(3, 4), lambda rnn: rnn(ones(5, 2, 3), (zeros(1, 2, 4), zeros(1, 2, 4))),
            TypeError, r"RNN: h0 must be one Tensor .* got a tuple of 2: an \(h, c\) pair is an LSTM's state", id="rnn-given-pair",
        ),
        pytest.param(
            lambda: nn.RNNCell(3, 4), lambda cell: cell(ones(2, 3), (zeros(2, 4), zeros(2, 4))),
            TypeError, r"RNNCell: h must be one Tensor .* an RNN keeps only h", id="rnn-cell-given-pair",
        ),
        pytest.param(
            lambda: nn.LSTM(3, 4), lambda lstm: lstm(ones(5, 2, 3), zeros(1, 2, 4)),
            TypeError, r"LSTM: h must be a pair \(h0, c0\) of Tensors .* got Tensor: .* pass h=\(h0, c0\)", id="lstm-given-tensor",
        ),
        pytest.param(
            lambda: nn.LSTMCell(3, 4), lambda cell: cell(ones(2, 3), zeros(2, 4)),
            TypeError, r"LSTMCell: h must be a pair \(h, c\) of Tensors .* got Tensor", id="lstm-cell-given-tensor",
        ),
        pytest.param(
            lambda: nn.LSTMCell(3, 4), lambda cell: cell(ones(2, 3), (zeros(2, 4),)),
            TypeError, r"LSTMCell: h must be a pair .* got a tuple of 1", id="lstm-cell-given-one-tuple",
        ),
        pytest.param(
            lambda: nn.LSTMCell(3, 4), lambda cell: cell(ones(3)),
            ValueError, r"LSTMCell: X has shape \(3,\), the batch axis is missing: .* X.reshape\(\(1, 3\)\)", id="lstm-cell-1d",
        ),
        pytest.param(
            lambda: nn.RNNCell(3, 4), lambda cell: cell(ones(3)),
            ValueError, r"RNNCell: X has shape \(3,\), the batch axis is missing", id="rnn-cell-1d",
        ),
        pytest.param(
            lambda: nn.RNNCell(3, 4), lambda cell: cell(ones(2, 5)),
            ValueError, r"RNNCell: X must have shape \(batch, input_size\) = \(batch, 3\), got \(2, 5\)", id="rnn-cell-features",
        ),
        pytest.param(
            lambda: nn.RNNCell(3, 4), lambda cell: cell(np.ones((2, 3), dtype="float32")),
            TypeError, r"RNNCell: X must be a needle Tensor, got ndarray", id="rnn-cell-numpy-input",
        ),
        pytest.param(
            lambda: nn.LSTM(3, 4), lambda lstm: lstm(ones(5, 2, 3), (np.zeros((1, 2, 4)), zeros(1, 2, 4))),
            TypeError, r"LSTM: h0 must be a needle Tensor, got ndarray", id="lstm-numpy-state",
        ),
    ],
)
def test_bad_inputs_and_states_are_refused_in_the_forward(make, call, error, words):
    np.random.seed(0)
    module = make()
    before = snapshot(module)
    live_before = autograd.snapshot().live_nodes
    with pytest.raises(error, match=words):
        call(module)
    assert_unchanged(module, before)
    assert autograd.snapshot().live_nodes <= live_before  # nothing was computed


def test_states_returned_by_the_layers_are_accepted_back():
    cell, lstm = nn.LSTMCell(3, 4), nn.LSTM(3, 4, num_layers=2)
    x = ones(2, 3)
    state = cell(x)
    assert [t.shape for t in cell(x, state)] == [(2, 4), (2, 4)]
    assert [t.shape for t in cell(x, list(state))] == [(2, 4), (2, 4)]
    fused = ndl.ops.lstm_cell(x, state[0], state[1], cell.W_ih, cell.W_hh)  # a TensorTuple
    assert [t.shape for t in cell(x, fused)] == [(2, 4), (2, 4)]
    _, carried = lstm(ones(5, 2, 3))
    output, (h_n, c_n) = lstm(ones(5, 2, 3), carried)
    assert output.shape == (5, 2, 4) and h_n.shape == c_n.shape == (2, 2, 4)


# ---- Embedding ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "indices, error, words",
    [
        pytest.param([[0.0, 1.5]], ValueError, r"Embedding index 1.5 at position \(0, 1\) is not a whole number", id="fraction"),
        pytest.param([[2.9]], ValueError, r"index 2.9 at position \(0, 0\)", id="fraction-near-row"),
        pytest.param([[1.0], [float("nan")]], ValueError, r"Embedding index nan at position \(1, 0\) is not a whole number", id="nan"),
        pytest.param([[float("inf")]], ValueError, r"index inf .* round or cast them first", id="infinity"),
        pytest.param([[3.0]], IndexError, r"Embedding has 3 rows, got index 3 at position \(0, 0\).*\[0, num_embeddings\)", id="past-end"),
        pytest.param([[1.0, -1.0]], IndexError, r"got index -1 at position \(0, 1\)", id="negative"),
        pytest.param([[1e30]], IndexError, r"Embedding has 3 rows, got index 1000000015047466219876688855040", id="huge-float"),
    ],
)
def test_embedding_refuses_indices_that_name_no_row(indices, error, words):
    np.random.seed(0)
    embed = nn.Embedding(3, 2)
    before = snapshot(embed)
    with pytest.raises(error, match=words):
        embed(ndl.Tensor(indices, dtype="float32"))
    assert_unchanged(embed, before)


def test_embedding_nan_does_not_reach_numpy_as_a_huge_negative_index():
    with pytest.raises(ValueError) as caught:
        nn.Embedding(3, 2)(ndl.Tensor([[float("nan")]]))
    assert "-9223372036854775808" not in str(caught.value)


def test_embedding_takes_integer_valued_floats_and_integers_alike(device):
    np.random.seed(0)
    embed = nn.Embedding(4, 2, device=device)
    rows = [[3, 0], [1, 3]]
    from_floats = embed(ndl.Tensor(rows, dtype="float32", device=device)).numpy()
    from_ints = embed(ndl.Tensor(rows, dtype="int64", device=device)).numpy()
    np.testing.assert_array_equal(from_floats, embed.weight.numpy()[np.array(rows)])
    np.testing.assert_array_equal(from_floats, from_ints)


def test_embedding_op_checks_direct_callers_too():
    weight = ndl.Tensor([[0.0, 1.0], [2.0, 3.0]])
    with pytest.raises(ValueError, match=r"index 0.5"):
        ndl.ops.embedding(ndl.Tensor([0.5]), weight)
    with pytest.raises(TypeError, match=r"must be integers .* got dtype bool"):
        ndl.ops.embedding(ndl.Tensor(np.array([True])), weight)


def test_embedding_names_indices_that_are_not_a_tensor():
    embed = nn.Embedding(3, 2)
    with pytest.raises(TypeError, match=r"embedding indices must be a needle Tensor .* got ndarray: wrap them with ndl.Tensor"):
        embed(np.array([[1, 2]]))
