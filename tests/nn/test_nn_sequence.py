"""Sequence modules against a numpy reference (forward), central differences (gradients) and, when
installed, PyTorch's RNN and LSTM given the same weights."""
import numpy as np
import pytest

import needle as ndl
from needle import nn, ops
from gradcheck import central_differences, check_gradients
from sequence_reference import lstm_forward, rnn_forward
from torch_oracle import optional_torch

PARAMETER_NAMES = ("W_ih", "W_hh", "bias_ih", "bias_hh")


def _cells(model):
    return model.rnn_cells if isinstance(model, nn.RNN) else model.lstm_cells


def _weights_of(model):
    return [{name: getattr(cell, name).numpy().astype(np.float64) for name in PARAMETER_NAMES} for cell in _cells(model)]


def _make(kind, input_size, hidden, num_layers, device, dtype="float32", **options):
    cls = nn.RNN if kind == "rnn" else nn.LSTM
    return cls(input_size, hidden, num_layers=num_layers, device=device, dtype=dtype, **options)


def _state(kind, rng, num_layers, batch, hidden):
    if kind == "rnn":
        return rng.normal(size=(num_layers, batch, hidden))
    return rng.normal(size=(num_layers, batch, hidden)), rng.normal(size=(num_layers, batch, hidden))


def _run(kind, model, X, state, device, dtype="float32"):
    """The model on numpy inputs; returns (output, final states as a list) as needle Tensors."""
    x = ndl.Tensor(X, device=device, dtype=dtype, requires_grad=False)
    if state is None:
        output, final = model(x)
    elif kind == "rnn":
        output, final = model(x, ndl.Tensor(state, device=device, dtype=dtype))
    else:
        output, final = model(x, tuple(ndl.Tensor(s, device=device, dtype=dtype) for s in state))
    return output, [final] if kind == "rnn" else list(final)


@pytest.mark.parametrize("kind", ["rnn", "lstm"])
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("with_state", [False, True], ids=["zero-state", "given-state"])
def test_forward_matches_numpy(kind, num_layers, with_state, device):
    rng = np.random.default_rng(num_layers)
    seq_len, batch, input_size, hidden = 5, 3, 4, 6
    model = _make(kind, input_size, hidden, num_layers, device)
    X = rng.normal(size=(seq_len, batch, input_size))
    state = _state(kind, rng, num_layers, batch, hidden) if with_state else None
    output, final = _run(kind, model, X, state, device)
    if kind == "rnn":
        want_output, want_h = rnn_forward(X, _weights_of(model), state)
        want_final = [want_h]
    else:
        want_output, want_final = lstm_forward(X, _weights_of(model), state)
    assert output.shape == (seq_len, batch, hidden)
    np.testing.assert_allclose(output.numpy(), want_output, rtol=1e-5, atol=1e-5)
    for got, want in zip(final, want_final):
        assert got.shape == (num_layers, batch, hidden)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_rnn_relu_and_no_bias_match_numpy(device):
    rng = np.random.default_rng(3)
    model = nn.RNN(3, 4, num_layers=2, bias=False, nonlinearity="relu", device=device)
    assert all(cell.bias_ih is None and cell.bias_hh is None for cell in model.rnn_cells)
    assert len(model.parameters()) == 4
    X = rng.normal(size=(4, 2, 3))
    output, h_n = model(ndl.Tensor(X, device=device))
    weights = [{"W_ih": cell.W_ih.numpy(), "W_hh": cell.W_hh.numpy()} for cell in model.rnn_cells]
    want_output, want_h = rnn_forward(X, weights, nonlinearity="relu")
    np.testing.assert_allclose(output.numpy(), want_output, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h_n.numpy(), want_h, rtol=1e-5, atol=1e-6)


def _sequence_function(kind, num_layers, with_state, device, nonlinearity="tanh"):
    """A function of (X, per-layer W_ih, W_hh, bias_ih, bias_hh..., [state]) that installs the
    weights as the cells' attributes (forward must read them on every call) and returns
    output and final state concatenated along the time axis."""
    input_size, hidden = 3, 4
    options = {"nonlinearity": nonlinearity} if kind == "rnn" else {}
    model = _make(kind, input_size, hidden, num_layers, device, dtype="float64", **options)

    def fn(X, *rest):
        weights, state = rest[: 4 * num_layers], rest[4 * num_layers :]
        for k, cell in enumerate(_cells(model)):
            for j, name in enumerate(PARAMETER_NAMES):
                setattr(cell, name, weights[4 * k + j])
        if not state:
            output, final = model(X)
        elif kind == "rnn":
            output, final = model(X, state[0])
        else:
            output, final = model(X, (state[0], state[1]))
        finals = [final] if kind == "rnn" else list(final)
        return ops.stack([output.sum(axes=(0,))] + [f.sum(axes=(0,)) for f in finals], 0)

    rng = np.random.default_rng(7)
    seq_len, batch = 3, 2
    arrays = [rng.normal(size=(seq_len, batch, input_size))]
    for k in range(num_layers):
        size_in = input_size if k == 0 else hidden
        gates = hidden if kind == "rnn" else 4 * hidden
        arrays += [rng.normal(scale=0.5, size=s) for s in ((size_in, gates), (hidden, gates), (gates,), (gates,))]
    if with_state:
        arrays += [rng.normal(size=(num_layers, batch, hidden)) for _ in range(1 if kind == "rnn" else 2)]
    return fn, arrays


@pytest.mark.parametrize("kind", ["rnn", "lstm"])
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("with_state", [False, True], ids=["zero-state", "given-state"])
def test_gradients_match_central_differences(kind, num_layers, with_state, device):
    fn, arrays = _sequence_function(kind, num_layers, with_state, device)
    check_gradients(fn, arrays, device, rtol=1e-5, atol=1e-7)


def test_relu_rnn_gradients_match_central_differences(device):
    fn, arrays = _sequence_function("rnn", 2, True, device, nonlinearity="relu")
    check_gradients(fn, arrays, device, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kind", ["rnn", "lstm"])
def test_cells_match_numpy_and_read_replaced_weights(kind, device):
    rng = np.random.default_rng(11)
    cls = nn.RNNCell if kind == "rnn" else nn.LSTMCell
    cell = cls(3, 4, device=device)
    gates = 4 if kind == "rnn" else 16
    assert cell.W_ih.shape == (3, gates) and cell.W_hh.shape == (4, gates)
    assert cell.bias_ih.shape == (gates,) and cell.bias_hh.shape == (gates,)
    replacement = rng.normal(size=(3, gates))
    cell.W_ih = nn.Parameter(ndl.Tensor(replacement, device=device, dtype="float32"))
    X = rng.normal(size=(2, 3))
    weights = [{name: getattr(cell, name).numpy() for name in PARAMETER_NAMES}]
    if kind == "rnn":
        h = rng.normal(size=(2, 4))
        got = cell(ndl.Tensor(X, device=device), ndl.Tensor(h, device=device)).numpy()
        want = rnn_forward(X[None], weights, h[None])[0][0]
    else:
        h, c = rng.normal(size=(2, 4)), rng.normal(size=(2, 4))
        got_h, got_c = cell(ndl.Tensor(X, device=device), (ndl.Tensor(h, device=device), ndl.Tensor(c, device=device)))
        _, (want_h, want_c) = lstm_forward(X[None], weights, (h[None], c[None]))
        np.testing.assert_allclose(got_c.numpy(), want_c[0], rtol=1e-5, atol=1e-6)
        got, want = got_h.numpy(), want_h[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
def test_lstm_cell_op_gradients_match_central_differences(with_bias, device):
    """The step op alone, two steps chained so that the state's adjoints are exercised too."""

    def two_steps(x, h, c, weight_ih, weight_hh, *bias):
        h1, c1 = ops.lstm_cell(x, h, c, weight_ih, weight_hh, *bias)
        h2, c2 = ops.lstm_cell(x * 0.5, h1, c1, weight_ih, weight_hh, *bias)
        return ops.stack([h2, c2 * 0.3, h1], 0)

    rng = np.random.default_rng(4)
    arrays = [rng.normal(size=s) for s in ((2, 3), (2, 4), (2, 4), (3, 16), (4, 16))]
    if with_bias:
        arrays.append(rng.normal(size=(16,)))
    check_gradients(two_steps, arrays, device)


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_rnn_cell_gradients_match_central_differences(nonlinearity, device):
    cell = nn.RNNCell(3, 4, nonlinearity=nonlinearity, device=device, dtype="float64")

    def two_steps(x, h, weight_ih, weight_hh, bias_ih, bias_hh):
        cell.W_ih, cell.W_hh, cell.bias_ih, cell.bias_hh = weight_ih, weight_hh, bias_ih, bias_hh
        return cell(x * 0.5, cell(x, h))

    rng = np.random.default_rng(6)
    arrays = [rng.normal(size=s) for s in ((2, 3), (2, 4), (3, 4), (4, 4), (4,), (4,))]
    check_gradients(two_steps, arrays, device)


@pytest.mark.parametrize("kind", ["rnn", "rnn-relu", "lstm"])
def test_a_sequence_equals_its_cells_stepped_one_by_one(kind, device):
    rng = np.random.default_rng(8)
    if kind == "lstm":
        model = nn.LSTM(3, 5, num_layers=2, device=device)
    else:
        model = nn.RNN(3, 5, num_layers=2, nonlinearity="relu" if kind == "rnn-relu" else "tanh", device=device)
    X = ndl.Tensor(rng.normal(size=(6, 2, 3)), device=device, requires_grad=False)
    output, final = model(X)
    finals = list(final) if kind == "lstm" else [final]
    steps = list(ops.split(X, 0))
    for k, cell in enumerate(_cells(model)):
        state, outputs = None, []
        for x in steps:
            state = cell(x, state)
            outputs.append(state[0] if kind == "lstm" else state)
        steps = outputs
        for got, want in zip(state if kind == "lstm" else [state], finals):
            np.testing.assert_allclose(got.numpy(), want.numpy()[k], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ops.stack(steps, 0).numpy(), output.numpy(), rtol=1e-5, atol=1e-6)


def test_initialization_is_uniform_in_one_over_sqrt_hidden():
    np.random.seed(0)
    cell = nn.LSTMCell(50, 25)
    for name in PARAMETER_NAMES:
        values = getattr(cell, name).numpy()
        assert np.abs(values).max() <= 1 / 5 and np.abs(values).max() > 0.19, name
    np.random.seed(0)
    expected_first = np.random.rand(50, 100) * 0.4 - 0.2  # the course's draw: rand(...) * (high - low) + low
    np.testing.assert_allclose(cell.W_ih.numpy(), expected_first, rtol=1e-6)


def test_parameters_and_state_dict_names():
    model = nn.LSTM(3, 4, num_layers=2)
    assert len(model.parameters()) == 8
    assert list(model.state_dict())[:2] == ["lstm_cells.0.W_ih", "lstm_cells.0.W_hh"]


def test_lstm_cell_second_order_gradient_says_what_is_missing():
    cell = nn.LSTMCell(2, 3, dtype="float64")
    x = ndl.Tensor(np.ones((1, 2)), dtype="float64")
    h, _ = cell(x)
    h.sum().backward()
    with pytest.raises(NotImplementedError, match="second-order"):
        cell.W_ih.grad.sum().backward()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: nn.RNN(3, 4)(ndl.init.ones(5, 3)), r"seq_len, batch, 3"),
        (lambda: nn.LSTM(3, 4)(ndl.init.ones(5, 2, 7)), r"seq_len, batch, 3"),
        (lambda: nn.RNN(3, 4, num_layers=2)(ndl.init.ones(5, 2, 3), ndl.init.zeros(1, 2, 4)), r"h0 must have shape"),
        (lambda: nn.LSTM(3, 4)(ndl.init.ones(5, 2, 3), (ndl.init.zeros(1, 2, 4), ndl.init.zeros(1, 3, 4))), r"c0 must"),
        (lambda: nn.RNNCell(3, 4, nonlinearity="sigmoid"), r"nonlinearity"),
        (lambda: nn.LSTM(3, 4, num_layers=0), r"num_layers"),
    ],
)
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---- Embedding ----------------------------------------------------------------------------------
def test_embedding_equals_one_hot_product_and_sums_repeated_rows(device):
    np.random.seed(0)
    embed = nn.Embedding(6, 3, device=device)
    indices = np.array([[1, 4], [1, 0], [5, 1]], dtype=np.float32)  # word 1 three times
    out = embed(ndl.Tensor(indices, device=device, requires_grad=False))
    weight = embed.weight.numpy()
    one_hot = np.eye(6)[indices.astype(int)]
    np.testing.assert_allclose(out.numpy(), one_hot @ weight, rtol=1e-6)
    upstream = np.random.default_rng(0).normal(size=(3, 2, 3))
    for create_graph in (True, False):
        embed.weight.grad = None
        out = embed(ndl.Tensor(indices, device=device, requires_grad=False))
        out.backward(ndl.Tensor(upstream, device=device, dtype="float32"), create_graph=create_graph)
        want = np.einsum("tbv,tbd->vd", one_hot, upstream)
        np.testing.assert_allclose(embed.weight.grad.numpy(), want, rtol=1e-5, atol=1e-6)


def test_embedding_gradient_matches_central_differences(device):
    indices = ndl.Tensor(np.array([[0, 2], [2, 2]]), dtype="int64", device=device, requires_grad=False)
    check_gradients(lambda weight: ops.embedding(indices, weight) * 2, [np.random.default_rng(2).normal(size=(3, 4))], device)


def test_embedding_rejects_out_of_range_indices():
    with pytest.raises(IndexError, match=r"\[0, num_embeddings\)"):
        nn.Embedding(3, 2)(ndl.Tensor([[3.0]]))


# ---- split and stack used for sequences ----------------------------------------------------------
def test_split_pieces_used_in_a_recurrence_get_correct_gradients(device):
    """Each piece of split feeds a step; the stacked outputs are differentiated (both paths)."""

    def recurrence(X, W):
        h, outputs = None, []
        for x in ops.split(X, 0):
            h = ops.tanh(x @ W if h is None else x @ W + h)
            outputs.append(h)
        return ops.stack(outputs, 1)

    rng = np.random.default_rng(5)
    check_gradients(recurrence, [rng.normal(size=(4, 2, 3)), rng.normal(size=(3, 3))], device)


# ---- numpy (always) and PyTorch (where installed) as oracles of whole models ----------------------
def _parameters_of(model, bias):
    """The model's parameters in layer order, as (cell index, name, Tensor)."""
    names = PARAMETER_NAMES if bias else PARAMETER_NAMES[:2]
    return [(k, name, getattr(cell, name)) for k, cell in enumerate(_cells(model)) for name in names]


def _numpy_results(kind, num_layers, bias, X, states, flat):
    """The numpy reference's output and final states for parameters ``flat`` in layer order."""
    names = PARAMETER_NAMES if bias else PARAMETER_NAMES[:2]
    layers = [dict(zip(names, flat[k * len(names):(k + 1) * len(names)])) for k in range(num_layers)]
    if kind == "rnn":
        output, h_n = rnn_forward(X, layers, states[0] if states else None)
        return [output, h_n]
    output, (h_n, c_n) = lstm_forward(X, layers, tuple(states) if states else None)
    return [output, h_n, c_n]


def _numpy_loss(kind, num_layers, bias, state_count, weights):
    """``loss(X, *states, *parameters)`` of the numpy reference: the output and every final
    state, each weighted by its array in ``weights``, summed."""

    def loss(X, *rest):
        results = _numpy_results(kind, num_layers, bias, X, rest[:state_count], rest[state_count:])
        return float(sum((r * w).sum() for r, w in zip(results, weights)))

    return loss


def _torch_gradients(torch, kind, model, bias, X, state, weights, num_layers):
    """PyTorch's results and gradients for the same weights: (results, [grad of X, *states, *parameters])."""
    cls = torch.nn.RNN if kind == "rnn" else torch.nn.LSTM
    reference = cls(X.shape[2], _cells(model)[0].W_hh.shape[0], num_layers=num_layers, bias=bias).double()
    with torch.no_grad():
        for k, name, parameter in _parameters_of(model, bias):
            torch_name = {"W_ih": "weight_ih", "W_hh": "weight_hh"}.get(name, name)
            value = parameter.numpy().T if name.startswith("W") else parameter.numpy()
            getattr(reference, f"{torch_name}_l{k}").copy_(torch.tensor(value))
    torch_x = torch.tensor(X, requires_grad=True)
    torch_states = [torch.tensor(s, requires_grad=True) for s in state]
    if not torch_states:
        output, final = reference(torch_x)
    else:
        output, final = reference(torch_x, torch_states[0] if kind == "rnn" else tuple(torch_states))
    results = [output] + ([final] if kind == "rnn" else list(final))
    sum((t * torch.tensor(w)).sum() for t, w in zip(results, weights)).backward()
    grads = [torch_x.grad.numpy()] + [s.grad.numpy() for s in torch_states]
    for k, name, _ in _parameters_of(model, bias):
        torch_name = {"W_ih": "weight_ih", "W_hh": "weight_hh"}.get(name, name)
        grad = getattr(reference, f"{torch_name}_l{k}").grad.numpy()
        grads.append(grad.T if name.startswith("W") else grad)
    return [t.detach().numpy() for t in results], grads


@pytest.mark.parametrize("kind", ["rnn", "lstm"])
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("with_state", [False, True], ids=["zero-state", "given-state"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_outputs_and_gradients_match_numpy_and_torch(kind, num_layers, with_state, bias, device):
    """The numpy reference and its float64 central differences always; PyTorch too where installed."""
    rng = np.random.default_rng(num_layers * 10 + with_state)
    seq_len, batch, input_size, hidden = 6, 3, 5, 4
    model = _make(kind, input_size, hidden, num_layers, device, dtype="float64", bias=bias)
    X = rng.normal(size=(seq_len, batch, input_size))
    state = _state(kind, rng, num_layers, batch, hidden) if with_state else None
    state = [] if state is None else [state] if kind == "rnn" else list(state)

    x = ndl.Tensor(X, device=device, dtype="float64")
    states = [ndl.Tensor(s, device=device, dtype="float64") for s in state]
    if not states:
        output, final = model(x)
    else:
        output, final = model(x, states[0] if kind == "rnn" else tuple(states))
    results = [output] + ([final] if kind == "rnn" else list(final))
    # a loss that reads the output and every final state, weighted so no term cancels
    weights = [rng.normal(size=t.shape) for t in results]
    loss = None
    for t, w in zip(results, weights):
        term = (t * ndl.Tensor(w, device=device, dtype="float64")).sum()
        loss = term if loss is None else loss + term
    loss.backward()
    parameters = [parameter for _, _, parameter in _parameters_of(model, bias)]
    ours = [x.grad.numpy()] + [s.grad.numpy() for s in states] + [p.grad.numpy() for p in parameters]
    inputs = [X] + state + [p.numpy() for p in parameters]

    wanted = _numpy_results(kind, num_layers, bias, X, state, inputs[1 + len(state):])
    for got, want in zip(results, wanted):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)
    numpy_loss = _numpy_loss(kind, num_layers, bias, len(state), weights)
    assert np.isclose(float(loss.numpy()), numpy_loss(*inputs), rtol=1e-10)
    for index, (got, want) in enumerate(zip(ours, central_differences(numpy_loss, inputs))):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8, err_msg=f"gradient of input {index}")

    torch = optional_torch()
    if torch is None:
        return
    torch_results, torch_grads = _torch_gradients(torch, kind, model, bias, X, state, weights, num_layers)
    for got, want in zip(results, torch_results):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)
    for index, (got, want) in enumerate(zip(ours, torch_grads)):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11, err_msg=f"gradient of input {index} (torch)")


@pytest.mark.parametrize("kind", ["rnn", "lstm"])
def test_lazy_mode_gives_the_eager_values_and_gradients(kind, lazy_mode):
    import needle.autograd

    X_data = np.random.default_rng(9).normal(size=(5, 2, 3))
    np.random.seed(0)
    model = _make(kind, 3, 4, 2, ndl.cpu(), dtype="float64")

    def run(lazy):
        needle.autograd.LAZY_MODE = lazy
        X = ndl.Tensor(X_data, dtype="float64")
        for parameter in model.parameters():
            parameter.grad = None
        output, _ = model(X)
        (output * output).sum().backward()
        return [output.numpy(), X.grad.numpy()] + [p.grad.numpy() for p in model.parameters()]

    eager = run(False)
    got = run(lazy_mode)
    for a, b in zip(got, eager):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    want_output, _ = (rnn_forward if kind == "rnn" else lstm_forward)(X_data, _weights_of(model))
    np.testing.assert_allclose(got[0], want_output, rtol=1e-10)
