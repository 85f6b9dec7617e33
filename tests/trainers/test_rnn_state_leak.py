"""The hidden-state leak with needle's own recurrent layers: a state (an RNN's h, an LSTM's (h, c))
carried from batch to batch without detach() warns early and names the line that computes it;
truncated back-propagation through time, which detaches once per batch, stays silent.

The lines a warning must name end with ``# site: NAME``; ``marked_line`` finds them.
"""
import warnings

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim
from trainers import DiagnosticWarning, GraphLeakWarning, MemoryMonitor

SEQ_LEN, BATCH, FEATURES, HIDDEN, CLASSES = 5, 4, 3, 8, 3
LEAK_FROM = 10  # the loops detach the state until this iteration, then stop
ITERATIONS = 40
EARLY = 10  # the warning must come within this many iterations of the leak's start


def marked_line(name):
    with open(__file__) as handle:
        lines = [number for number, text in enumerate(handle, 1) if text.rstrip().endswith(f"# site: {name}")]
    assert len(lines) == 1, f"expected one line marked '# site: {name}', found {len(lines)}"
    return lines[0]


def sequences(count, seed=1):
    """``count`` random (sequence (SEQ_LEN, BATCH, FEATURES), labels (BATCH,)) pairs as constants."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        x = rng.standard_normal((SEQ_LEN, BATCH, FEATURES)).astype("float32")
        y = rng.integers(0, CLASSES, size=BATCH)
        yield ndl.Tensor(x, requires_grad=False), ndl.Tensor(y, dtype="int64", requires_grad=False)


def make(kind, num_layers=1):
    np.random.seed(0)
    layer = nn.LSTM(FEATURES, HIDDEN, num_layers) if kind == "lstm" else nn.RNN(FEATURES, HIDDEN, num_layers)
    head = nn.Linear(HIDDEN, CLASSES)
    return layer, head, optim.SGD(layer.parameters() + head.parameters(), lr=0.05), nn.SoftmaxLoss()


def lstm_loop(monitor, iterations, leak_from=LEAK_FROM, num_layers=1):
    """Carries (h, c); detaches it until ``leak_from`` (truncated BPTT), then forgets to."""
    lstm, head, optimizer, loss_fn = make("lstm", num_layers)
    h = None
    for i, (x, y) in enumerate(sequences(iterations)):
        if h is not None and i < leak_from:
            h = tuple(state.detach() for state in h)
        optimizer.reset_grad()
        output, h = lstm(x, h)  # site: lstm_state
        loss = loss_fn(head(output.sum((0,))), y)
        loss.backward()
        optimizer.step()
        monitor.step()


def rnn_loop(monitor, iterations, leak_from=LEAK_FROM, num_layers=1):
    """Carries h; detaches it until ``leak_from``, then forgets to."""
    rnn, head, optimizer, loss_fn = make("rnn", num_layers)
    h = None
    for i, (x, y) in enumerate(sequences(iterations)):
        if h is not None and i < leak_from:
            h = h.detach()
        optimizer.reset_grad()
        output, h = rnn(x, h)  # site: rnn_state
        loss = loss_fn(head(output.sum((0,))), y)
        loss.backward()
        optimizer.step()
        monitor.step()


class TracingMonitor(MemoryMonitor):
    """A MemoryMonitor that notes the iteration at which each caught warning arrived."""

    def __init__(self, caught, **options):
        super().__init__(**options)
        self.caught = caught
        self.arrivals = []

    def step(self):
        seen = len(self.caught)
        record = super().step()
        self.arrivals.extend((record.iteration, w) for w in self.caught[seen:])
        return record


def run(loop, iterations=ITERATIONS, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with TracingMonitor(caught) as monitor:
            loop(monitor, iterations, **options)
    return monitor.arrivals


CASES = [
    # (loop, the marked line, the fix the message must show)
    (lstm_loop, "lstm_state", "h = tuple(s.detach() for s in h)"),
    (rnn_loop, "rnn_state", "h = h.detach()"),
]


def first_leak_warning(loop, num_layers):
    # NOTE: a leaky run backpropagates through every earlier batch, so it stops soon after the window.
    arrivals = run(loop, iterations=LEAK_FROM + EARLY + 2, num_layers=num_layers)
    leaks = [(iteration, w) for iteration, w in arrivals if w.category is GraphLeakWarning]
    assert leaks, f"no GraphLeakWarning; got {[str(w.message) for _, w in arrivals]}"
    return leaks[0]


@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("loop, site, fix", CASES, ids=["lstm", "rnn"])
def test_a_carried_state_without_detach_warns_early_at_the_line_computing_it(loop, site, fix, num_layers):
    iteration, warning = first_leak_warning(loop, num_layers)
    assert LEAK_FROM <= iteration < LEAK_FROM + EARLY, iteration
    assert warning.filename == __file__ and warning.lineno == marked_line(site), (warning.filename, warning.lineno)
    assert f"{__file__}:{marked_line(site)}:" in str(warning.message)


@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("loop, site, fix", CASES, ids=["lstm", "rnn"])
def test_the_warning_shows_the_detach_once_per_batch_fix(loop, site, fix, num_layers):
    """The fix is written for the state the line carries: the (h, c) tuple, or the tensor h."""
    _, warning = first_leak_warning(loop, num_layers)
    assert fix in str(warning.message), str(warning.message)


@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("loop", [lstm_loop, rnn_loop], ids=["lstm", "rnn"])
def test_truncated_bptt_that_detaches_every_batch_stays_silent(loop, num_layers):
    arrivals = run(loop, leak_from=ITERATIONS, num_layers=num_layers)
    assert not [w for _, w in arrivals if issubclass(w.category, DiagnosticWarning)], [
        str(w.message) for _, w in arrivals
    ]
