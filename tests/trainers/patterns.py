"""Loops as users write them, leaky and healthy, for the issue-11 leak and no_grad tests.

Every loop takes a ``MemoryMonitor`` and a number of iterations, and steps the monitor once per
iteration. Leaky ones start leaking at ``start`` (default ``START``). A line a warning must name
ends with ``# site: NAME``; :func:`site` finds its number, so no test hard-codes one.
"""
import collections

import numpy as np

import needle as ndl
from needle import nn, optim

FEATURES, HIDDEN, CLASSES, BATCH = 6, 12, 3, 8
START = 10


def site(name):
    """The line number in this file of the line marked ``# site: name``."""
    with open(__file__) as handle:
        lines = [n for n, text in enumerate(handle, 1) if text.rstrip().endswith(f"# site: {name}")]
    if len(lines) != 1:
        raise LookupError(f"expected one line marked '# site: {name}', found {len(lines)}")
    return lines[0]


def data(count, seed=1, batch=BATCH):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        x = rng.standard_normal((batch, FEATURES)).astype("float32")
        y = rng.integers(0, CLASSES, size=batch)
        yield ndl.Tensor(x, requires_grad=False), ndl.Tensor(y, dtype="int64", requires_grad=False)


def classifier(seed=0):
    np.random.seed(seed)
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))
    return model, optim.SGD(model.parameters(), lr=0.05), nn.SoftmaxLoss()


# ---- leaks at a cadence, and late ----------------------------------------------------------------
def progress_sum_every(monitor, iterations, every=4, start=START):
    """A live loss added to a coarse progress sum only every ``every``-th iteration."""
    model, opt, loss_fn = classifier()
    cumulative = 0.0
    for i, (x, y) in enumerate(data(iterations)):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if i >= start and (i - start) % every == 0:
            cumulative += loss  # site: progress_sum
        monitor.step()


def curve_every(monitor, iterations, every=4, start=START):
    """A live loss appended to a curve only every ``every``-th iteration."""
    model, opt, loss_fn = classifier()
    curve = []
    for i, (x, y) in enumerate(data(iterations)):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if i >= start and (i - start) % every == 0:
            curve.append(loss)  # site: curve
        monitor.step()


def kept_for_confusion_matrix(monitor, iterations, start=START):
    """After the step, ``kept.append(model(x))``: a graph no backward() ever goes through."""
    model, opt, loss_fn = classifier()
    kept = []
    for i, (x, y) in enumerate(data(iterations)):
        opt.reset_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        if i >= start:
            kept.append(model(x))  # site: kept
        monitor.step()


# ---- how the user names a container --------------------------------------------------------------
def nested_dict_history(monitor, iterations, start=START):
    model, opt, loss_fn = classifier()
    hist = {"train": {"loss": []}, "val": {"loss": []}}
    for i, (x, y) in enumerate(data(iterations)):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if i >= start:
            hist["train"]["loss"].append(loss)  # site: nested_dict
        monitor.step()


class CurveLogger:
    def __init__(self):
        self.curve = []

    def fit(self, monitor, iterations, start=START):
        model, opt, loss_fn = classifier()
        for i, (x, y) in enumerate(data(iterations)):
            opt.reset_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            if i >= start:
                self.curve.append(loss)  # site: self_curve
            monitor.step()


def attribute_curve(monitor, iterations, start=START):
    CurveLogger().fit(monitor, iterations, start)


def extend_two_losses(monitor, iterations, start=START):
    model, opt, loss_fn = classifier()
    log = []
    for i, (x, y) in enumerate(data(iterations)):
        opt.reset_grad()
        logits = model(x)
        ce = loss_fn(logits, y)
        mse = (logits * logits).sum() / BATCH
        (ce + 0.01 * mse).backward()
        opt.step()
        if i >= start:
            log.extend([ce, mse])  # site: extend
        monitor.step()


def losses_by_step(monitor, iterations, start=START):
    model, opt, loss_fn = classifier()
    by_step = {}
    for i, (x, y) in enumerate(data(iterations)):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if i >= start:
            by_step[i] = loss  # site: setitem
        monitor.step()


# ---- recurrent state carried across batches ------------------------------------------------------
class TanhCell(nn.Module):
    """h' = tanh(W_ih x + W_hh h), from two Linear layers."""

    def __init__(self):
        super().__init__()
        self.ih = nn.Linear(FEATURES, HIDDEN)
        self.hh = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, x, h):
        return ndl.ops.tanh(self.ih(x) + self.hh(h))


class PairCell(nn.Module):
    """An LSTM-like cell whose state is the tuple (h, c)."""

    def __init__(self):
        super().__init__()
        self.ih = nn.Linear(FEATURES, 2 * HIDDEN)
        self.hh = nn.Linear(HIDDEN, 2 * HIDDEN, bias=False)

    def forward(self, x, state):
        h, c = state
        mixed = self.ih(x) + self.hh(h)
        a = ndl.ops.tanh(mixed.reshape((BATCH, 2, HIDDEN)).sum((1,)))
        c = 0.5 * c + 0.5 * a
        h = ndl.ops.tanh(c)
        return h, c


def recurrent_run(monitor, iterations, state="tensor", detach=False, start=START):
    """A recurrent cell over a stream of batches, the state carried from batch to batch."""
    np.random.seed(0)
    cell = TanhCell() if state == "tensor" else PairCell()
    head = nn.Linear(HIDDEN, CLASSES)
    params = cell.parameters() + head.parameters()
    opt = optim.SGD(params, lr=0.01)
    loss_fn = nn.SoftmaxLoss()
    zeros = lambda: ndl.Tensor(np.zeros((BATCH, HIDDEN), dtype="float32"), requires_grad=False)  # noqa: E731
    h = zeros() if state == "tensor" else (zeros(), zeros())
    for i, (x, y) in enumerate(data(iterations)):
        if detach or i < start:
            h = h.detach() if state == "tensor" else tuple(s.detach() for s in h)
        h = cell(x, h)  # site: recurrent
        out = h if state == "tensor" else h[0]
        loss = loss_fn(head(out), y)
        opt.reset_grad()
        loss.backward()
        opt.step()
        monitor.step()


# ---- evaluation without no_grad ------------------------------------------------------------------
def eval_argmax(monitor, iterations):
    model, _, _ = classifier()
    model.eval()
    hits = 0
    for x, y in data(iterations):
        pred = model(x).numpy().argmax(1)  # site: eval_argmax
        hits += int((pred == y.numpy()).sum())
        monitor.step()


def eval_float_loss(monitor, iterations):
    model, _, loss_fn = classifier()
    val = 0.0
    for xv, yv in data(iterations):
        val += float(loss_fn(model(xv), yv).numpy())  # site: eval_float
        monitor.step()


def eval_watch(monitor, iterations):
    model, _, loss_fn = classifier()
    test_loader = list(data(iterations))
    correct = 0
    for x, y in monitor.watch(test_loader):
        correct += int((model(x).numpy().argmax(1) == y.numpy()).sum())  # site: eval_watch
    return correct


def eval_kept(monitor, iterations):
    model, _, _ = classifier()
    outputs = []
    for x, _ in data(iterations):
        outputs.append(model(x))  # site: eval_kept
        monitor.step()


def train_with_eval_bursts(monitor, iterations, burst=3, train_steps=5):
    """``train_steps`` training steps, then ``burst`` validation batches without no_grad, repeated."""
    model, opt, loss_fn = classifier()
    val_batches = list(data(burst, seed=5))
    done = 0
    batches = data(iterations)
    while done < iterations:
        for _ in range(train_steps):
            x, y = next(batches)
            opt.reset_grad()
            loss = loss_fn(model(x), y)  # site: burst_train
            loss.backward()
            opt.step()
            monitor.step()
            done += 1
        for xv, yv in val_batches:
            val_loss = loss_fn(model(xv), yv)  # site: burst_eval
            float(val_loss.numpy())
            monitor.step()
            done += 1


# ---- healthy loops -----------------------------------------------------------------------------------
def lecture_detach(monitor, iterations):
    x = ndl.Tensor([2.0], requires_grad=True)
    sum_loss = 0
    for _ in range(iterations):
        sum_loss = (sum_loss + x * x).detach()
        monitor.step()


def micro_batches_summed(monitor, iterations, micro=64):
    """64 micro-batch losses summed before one backward; the monitor steps per micro-batch."""
    model, opt, loss_fn = classifier()
    total = None
    for i, (x, y) in enumerate(data(iterations, batch=2)):
        loss = loss_fn(model(x), y)
        total = loss if total is None else total + loss
        if (i + 1) % micro == 0:
            opt.reset_grad()
            (total / micro).backward()
            opt.step()
            total = None
        monitor.step()


def gradient_accumulation_list(monitor, iterations, micro=4):
    """Forwards summed before one backward, the micro-batch losses kept in a list meanwhile."""
    model, opt, loss_fn = classifier()
    pending = []
    for i, (x, y) in enumerate(data(iterations)):
        pending.append(loss_fn(model(x), y) / micro)
        if len(pending) == micro:
            opt.reset_grad()
            total = pending[0]
            for loss in pending[1:]:
                total = total + loss
            total.backward()
            opt.step()
            pending = []
        monitor.step()


def gan(monitor, iterations):
    """Two models, two optimizers and two backward()s per iteration."""
    np.random.seed(0)
    generator = nn.Sequential(nn.Linear(4, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, FEATURES))
    discriminator = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 2))
    opt_g = optim.Adam(generator.parameters(), lr=1e-3)
    opt_d = optim.Adam(discriminator.parameters(), lr=1e-3)
    loss_fn = nn.SoftmaxLoss()
    rng = np.random.default_rng(3)
    real_label = ndl.Tensor(np.ones(BATCH), dtype="int64", requires_grad=False)
    fake_label = ndl.Tensor(np.zeros(BATCH), dtype="int64", requires_grad=False)
    for x, _ in data(iterations):
        z = ndl.Tensor(rng.standard_normal((BATCH, 4)).astype("float32"), requires_grad=False)
        fake = generator(z)
        opt_d.reset_grad()
        d_loss = loss_fn(discriminator(x), real_label) + loss_fn(discriminator(fake.detach()), fake_label)
        d_loss.backward()
        opt_d.step()
        opt_g.reset_grad()
        g_loss = loss_fn(discriminator(fake), real_label)
        g_loss.backward()
        opt_g.step()
        monitor.step()


def lazy_training(monitor, iterations):
    saved = ndl.autograd.LAZY_MODE
    ndl.autograd.LAZY_MODE = True
    try:
        model, opt, loss_fn = classifier()
        for x, y in data(iterations):
            opt.reset_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            float(loss.numpy())
            monitor.step()
    finally:
        ndl.autograd.LAZY_MODE = saved


def numpy_cache(monitor, iterations):
    model, opt, loss_fn = classifier()
    cache = []
    for x, y in data(iterations):
        opt.reset_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        opt.step()
        cache.append(logits.numpy())
        monitor.step()


def bounded_deque(monitor, iterations):
    model, opt, loss_fn = classifier()
    recent = collections.deque(maxlen=10)
    for x, y in data(iterations):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        recent.append(loss.detach())
        monitor.step()


def ema_weights_no_grad(monitor, iterations):
    model, opt, loss_fn = classifier()
    ema = [p.detach() for p in model.parameters()]
    for x, y in data(iterations):
        opt.reset_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        with ndl.no_grad():
            ema = [0.99 * e + 0.01 * p for e, p in zip(ema, model.parameters())]
        monitor.step()


def state_dict_every(monitor, iterations, every=5):
    model, opt, loss_fn = classifier()
    saved = []
    for i, (x, y) in enumerate(data(iterations)):
        opt.reset_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        if i % every == 0:
            saved.append({"model": model.state_dict(), "optimizer": opt.state_dict()})
        monitor.step()


@ndl.no_grad()
def predict(model, x):
    return model(x).numpy().argmax(1)


def no_grad_predict_helper(monitor, iterations):
    model, opt, loss_fn = classifier()
    for i, (x, y) in enumerate(data(iterations)):
        if i % 3 == 2:
            predict(model, x)
        else:
            opt.reset_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        monitor.step()


def loss_outside_no_grad(monitor, iterations):
    """Validation under no_grad; the loss computed outside the block on the constant logits."""
    model, opt, loss_fn = classifier()
    for i, (x, y) in enumerate(data(iterations)):
        if i % 4 == 3:
            with ndl.no_grad():
                logits = model(x)
            float(loss_fn(logits, y).numpy())
        else:
            opt.reset_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        monitor.step()


HEALTHY = {
    "lecture_detach": (lecture_detach, 120),
    "micro_batches_summed_64": (micro_batches_summed, 256),
    "gradient_accumulation_list": (gradient_accumulation_list, 120),
    "gan": (gan, 120),
    "lazy_training": (lazy_training, 120),
    "numpy_cache": (numpy_cache, 200),
    "bounded_deque": (bounded_deque, 200),
    "ema_weights_no_grad": (ema_weights_no_grad, 120),
    "state_dict_every": (state_dict_every, 120),
    "no_grad_predict_helper": (no_grad_predict_helper, 120),
    "loss_outside_no_grad": (loss_outside_no_grad, 120),
    "truncated_bptt_tensor": (lambda m, n: recurrent_run(m, n, "tensor", detach=True), 120),
    "truncated_bptt_tuple": (lambda m, n: recurrent_run(m, n, "tuple", detach=True), 120),
}


def summed_micro_batches_with_eval_bursts(monitor, iterations, micro=4, burst=3, cycle=20):
    """Micro-batch losses summed for one backward(), and every ``cycle`` steps a short validation
    without no_grad: the summing stays silent, the validation does not."""
    model, opt, loss_fn = classifier()
    val_batches = list(data(burst, seed=5))
    total = None
    for i, (x, y) in enumerate(data(iterations)):
        loss = loss_fn(model(x), y)
        total = loss if total is None else total + loss
        if (i + 1) % micro == 0:
            opt.reset_grad()
            total.backward()
            opt.step()
            total = None
        monitor.step()
        if (i + 1) % cycle == 0:
            for xv, yv in val_batches:
                float(loss_fn(model(xv), yv).numpy())  # site: mixed_eval
                monitor.step()


class Logger:
    """A user's logger: the line that adds to the container is in a method the loop calls."""

    def __init__(self):
        self.values = []

    def log(self, value):
        self.values.append(value)  # site: logger_append


def logged_through_a_helper(monitor, iterations, start=START):
    model, opt, loss_fn = classifier()
    logger = Logger()
    for i, (x, y) in enumerate(data(iterations)):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if i >= start:
            logger.log(loss)
        monitor.step()


class StatefulModel(nn.Module):
    """A model that keeps its recurrent state on itself, never detached."""

    def __init__(self):
        super().__init__()
        self.cell = TanhCell()
        self.head = nn.Linear(HIDDEN, CLASSES)
        self.hidden = ndl.Tensor(np.zeros((BATCH, HIDDEN), dtype="float32"), requires_grad=False)

    def forward(self, x):
        self.hidden = self.cell(x, self.hidden)  # site: stateful
        return self.head(self.hidden)


def state_kept_on_the_model(monitor, iterations):
    np.random.seed(0)
    model = StatefulModel()
    opt, loss_fn = optim.SGD(model.parameters(), lr=0.01), nn.SoftmaxLoss()
    for x, y in data(iterations):
        opt.reset_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        monitor.step()
