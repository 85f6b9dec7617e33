"""Pure-numpy RNN and LSTM forward passes in the course's layout (x @ W_ih), the tests' reference."""
import numpy as np


def sigmoid(a):
    return 1 / (1 + np.exp(-a))


def rnn_forward(X, layers, h0=None, nonlinearity="tanh"):
    """``layers``: one dict per layer with W_ih, W_hh, bias_ih, bias_hh (biases may be None).

    Returns (output (T, B, H), h_n (L, B, H)).
    """
    activation = np.tanh if nonlinearity == "tanh" else (lambda a: np.maximum(a, 0))
    steps = list(X)
    last = []
    for k, weights in enumerate(layers):
        hidden = weights["W_hh"].shape[0]
        h = np.zeros((X.shape[1], hidden)) if h0 is None else h0[k]
        outputs = []
        for x in steps:
            a = x @ weights["W_ih"] + h @ weights["W_hh"]
            for name in ("bias_ih", "bias_hh"):
                if weights.get(name) is not None:
                    a = a + weights[name]
            h = activation(a)
            outputs.append(h)
        steps = outputs
        last.append(h)
    return np.stack(steps), np.stack(last)


def lstm_forward(X, layers, state=None):
    """Gates in PyTorch's order (i, f, g, o). Returns (output, (h_n, c_n))."""
    steps = list(X)
    last_h, last_c = [], []
    for k, weights in enumerate(layers):
        hidden = weights["W_hh"].shape[0]
        if state is None:
            h = c = np.zeros((X.shape[1], hidden))
        else:
            h, c = state[0][k], state[1][k]
        outputs = []
        for x in steps:
            a = x @ weights["W_ih"] + h @ weights["W_hh"]
            for name in ("bias_ih", "bias_hh"):
                if weights.get(name) is not None:
                    a = a + weights[name]
            i, f, g, o = (a[:, j * hidden : (j + 1) * hidden] for j in range(4))
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
            outputs.append(h)
        steps = outputs
        last_h.append(h)
        last_c.append(c)
    return np.stack(steps), (np.stack(last_h), np.stack(last_c))
