"""Training loops, leaky and healthy, for the memory monitor's tests: one function per pattern.

Each loop takes a ``MemoryMonitor`` and calls ``monitor.step()`` once per iteration. Leaky loops
run healthily until iteration ``leak_from`` and then start the leak. The line a warning must
name carries a ``# site: NAME`` comment; :func:`marked_line` finds it, so no test hard-codes a
line number.
"""
import numpy as np

import needle as ndl
from needle import nn, optim

FEATURES, HIDDEN, CLASSES, BATCH = 8, 16, 4, 16
LEAK_FROM = 10


def marked_line(name):
    """The line number in this file of the line marked ``# site: name``."""
    with open(__file__) as handle:
        lines = [number for number, text in enumerate(handle, 1) if text.rstrip().endswith(f"# site: {name}")]
    if len(lines) != 1:
        raise LookupError(f"expected one line marked '# site: {name}' in {__file__}, found {len(lines)}")
    return lines[0]


def mlp(seed=0, *extra_layers):
    """A tiny classifier: Linear, ReLU, any extra layers, Linear."""
    np.random.seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), *extra_layers, nn.Linear(HIDDEN, CLASSES))


def batches(count, batch=BATCH, seed=1):
    """``count`` random (inputs, labels) batches as constant tensors."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        x = rng.standard_normal((batch, FEATURES)).astype("float32")
        y = rng.integers(0, CLASSES, size=batch)
        yield ndl.Tensor(x, requires_grad=False), ndl.Tensor(y, dtype="int64", requires_grad=False)


def setup(seed=0):
    model = mlp(seed)
    return model, optim.SGD(model.parameters(), lr=0.05), nn.SoftmaxLoss()


# ---- leaky loops ------------------------------------------------------------------------------
def accumulate_assign(monitor, iterations, leak_from=LEAK_FROM):
    model, optimizer, loss_fn = setup()
    total = 0.0
    for i, (x, y) in enumerate(batches(iterations)):
        optimizer.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if i >= leak_from:
            total = total + loss  # site: accumulate_assign
        monitor.step()
    return total


def accumulate_iadd(monitor, iterations, leak_from=LEAK_FROM):
    model, optimizer, loss_fn = setup()
    total_loss = 0.0
    for i, (x, y) in enumerate(batches(iterations)):
        optimizer.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if i >= leak_from:
            total_loss += loss  # site: accumulate_iadd
        monitor.step()
    return total_loss


def losses_in_list(monitor, iterations, leak_from=LEAK_FROM):
    model, optimizer, loss_fn = setup()
    epoch_losses = []
    for i, (x, y) in enumerate(batches(iterations)):
        optimizer.reset_grad()
        loss = loss_fn(model(x), y)  # site: losses_made
        loss.backward()
        optimizer.step()
        if i >= leak_from:
            epoch_losses.append(loss)  # site: losses_in_list
        monitor.step()
    return epoch_losses


def predictions_in_list(monitor, iterations, leak_from=LEAK_FROM):
    model, optimizer, loss_fn = setup()
    predictions = []
    for i, (x, y) in enumerate(batches(iterations)):
        optimizer.reset_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        if i >= leak_from:
            predictions.append(logits)  # site: predictions_in_list
        monitor.step()
    return predictions


def loss_moving_average(monitor, iterations, leak_from=LEAK_FROM):
    model, optimizer, loss_fn = setup()
    smoothed = None
    for i, (x, y) in enumerate(batches(iterations)):
        optimizer.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if i >= leak_from:
            smoothed = loss if smoothed is None else 0.9 * smoothed + 0.1 * loss  # site: loss_moving_average
        monitor.step()
    return smoothed


def recurrent_weights(seed=0):
    rng = np.random.default_rng(seed)
    w_in = ndl.Tensor(rng.standard_normal((FEATURES, HIDDEN)).astype("float32") * 0.3)
    w_hidden = ndl.Tensor(rng.standard_normal((HIDDEN, HIDDEN)).astype("float32") * 0.3)
    return w_in, w_hidden


def hidden_state_carried(monitor, iterations, leak_from=LEAK_FROM):
    """A recurrent state carried from batch to batch; detached until ``leak_from``, then not."""
    w_in, w_hidden = recurrent_weights()
    hidden = ndl.Tensor(np.zeros((BATCH, HIDDEN), dtype="float32"), requires_grad=False)
    for i, (x, _) in enumerate(batches(iterations)):
        if i < leak_from:
            hidden = hidden.detach()
        hidden = ndl.ops.tanh(x @ w_in + hidden @ w_hidden)  # site: hidden_state
        loss = (hidden * hidden).sum()
        loss.backward()
        monitor.step()
    return hidden


class RunningMean(nn.Module):
    """A user-written layer that tracks the mean of its input, mistakenly with the graph."""

    def __init__(self, features, keep_graph_from=LEAK_FROM):
        super().__init__()
        self.running_mean = ndl.Tensor(np.zeros(features, dtype="float32"), requires_grad=False)
        self.keep_graph_from = keep_graph_from
        self.calls = 0

    def forward(self, x):
        batch_mean = x.sum((0,)) / x.shape[0]
        if self.calls < self.keep_graph_from:
            batch_mean = batch_mean.detach()
        self.calls += 1
        self.running_mean = 0.9 * self.running_mean + 0.1 * batch_mean  # site: running_mean
        return x


def running_statistics_with_graph(monitor, iterations, leak_from=LEAK_FROM):
    model = mlp(0, RunningMean(HIDDEN, keep_graph_from=leak_from))
    optimizer = optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.SoftmaxLoss()
    for x, y in batches(iterations):
        optimizer.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        monitor.step()
    return model


def evaluation_without_no_grad(monitor, iterations):
    model, _, loss_fn = setup()
    model.eval()
    correct = 0
    for x, y in batches(iterations):
        logits = model(x)  # site: evaluation_forward
        correct += int((logits.numpy().argmax(axis=1) == y.numpy()).sum())
        monitor.step()
    return correct


def evaluation_with_no_grad(monitor, iterations):
    model, _, loss_fn = setup()
    model.eval()
    correct = 0
    with ndl.no_grad():
        for x, y in batches(iterations):
            logits = model(x)
            correct += int((logits.numpy().argmax(axis=1) == y.numpy()).sum())
            monitor.step()
    return correct


LEAKY = {
    "accumulate_assign": accumulate_assign,
    "accumulate_iadd": accumulate_iadd,
    "losses_in_list": losses_in_list,
    "predictions_in_list": predictions_in_list,
    "loss_moving_average": loss_moving_average,
    "hidden_state": hidden_state_carried,
    "running_mean": running_statistics_with_graph,
}


# ---- healthy loops: none of these may warn --------------------------------------------------------
def train_step(model, optimizer, loss_fn, x, y):
    optimizer.reset_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


def gradient_accumulation(monitor, iterations, every=4):
    """backward() on every micro-batch, one optimizer step every ``every``."""
    model, optimizer, loss_fn = setup()
    for i, (x, y) in enumerate(batches(iterations)):
        loss = loss_fn(model(x), y) / every
        loss.backward()
        if (i + 1) % every == 0:
            optimizer.step()
            optimizer.reset_grad()
        monitor.step()


def summed_micro_batches(monitor, iterations, micro_batches=32, step_per="micro_batch"):
    """Sum up to 32 micro-batch losses, then one backward(); ``step_per`` says when the monitor steps."""
    model, optimizer, loss_fn = setup()
    data = batches(iterations * (micro_batches if step_per == "optimizer_step" else 1), batch=4)
    total, count = None, 0
    for x, y in data:
        loss = loss_fn(model(x), y)
        total = loss if total is None else total + loss
        count += 1
        if count == micro_batches:
            optimizer.reset_grad()
            (total / micro_batches).backward()
            optimizer.step()
            total, count = None, 0
            if step_per == "optimizer_step":
                monitor.step()
        if step_per == "micro_batch":
            monitor.step()


def truncated_bptt(monitor, iterations):
    w_in, w_hidden = recurrent_weights()
    hidden = ndl.Tensor(np.zeros((BATCH, HIDDEN), dtype="float32"), requires_grad=False)
    for x, _ in batches(iterations):
        hidden = hidden.detach()
        hidden = ndl.ops.tanh(x @ w_in + hidden @ w_hidden)
        loss = (hidden * hidden).sum()
        loss.backward()
        monitor.step()


def float_accumulation(monitor, iterations):
    model, optimizer, loss_fn = setup()
    total_loss = 0.0
    for x, y in batches(iterations):
        loss = train_step(model, optimizer, loss_fn, x, y)
        total_loss += float(loss.numpy())
        monitor.step()
    return total_loss


def detached_accumulation(monitor, iterations):
    model, optimizer, loss_fn = setup()
    total_loss = 0.0
    for x, y in batches(iterations):
        loss = train_step(model, optimizer, loss_fn, x, y)
        total_loss += loss.detach()
        monitor.step()
    return total_loss


def detached_moving_average(monitor, iterations):
    model, optimizer, loss_fn = setup()
    smoothed = None
    for x, y in batches(iterations):
        loss = train_step(model, optimizer, loss_fn, x, y).detach()
        smoothed = loss if smoothed is None else 0.9 * smoothed + 0.1 * loss
        monitor.step()
    return smoothed


def detached_lists(monitor, iterations):
    model, optimizer, loss_fn = setup()
    losses, predictions = [], []
    for x, y in batches(iterations):
        optimizer.reset_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        predictions.append(logits.detach())
        monitor.step()
    return losses, predictions


def adam_state_on_first_step(monitor, iterations):
    model = mlp(0)
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.SoftmaxLoss()
    for x, y in batches(iterations):
        train_step(model, optimizer, loss_fn, x, y)
        monitor.step()


def batch_norm_dropout_with_mode_switches(monitor, iterations):
    model = mlp(0, nn.BatchNorm1d(HIDDEN), nn.Dropout(0.2))
    optimizer = optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.SoftmaxLoss()
    for i, (x, y) in enumerate(batches(iterations)):
        if i % 5 == 4:
            model.eval()
            with ndl.no_grad():
                model(x)
            model.train()
        else:
            train_step(model, optimizer, loss_fn, x, y)
        monitor.step()


def partial_last_batch(monitor, epochs, samples=100, batch=16):
    model, optimizer, loss_fn = setup()
    rng = np.random.default_rng(2)
    inputs = rng.standard_normal((samples, FEATURES)).astype("float32")
    labels = rng.integers(0, CLASSES, size=samples)
    for _ in range(epochs):
        for start in range(0, samples, batch):
            x = ndl.Tensor(inputs[start : start + batch], requires_grad=False)
            y = ndl.Tensor(labels[start : start + batch], dtype="int64", requires_grad=False)
            train_step(model, optimizer, loss_fn, x, y)
            monitor.step()


def learning_rate_every_step(monitor, iterations):
    model, optimizer, loss_fn = setup()
    for i, (x, y) in enumerate(batches(iterations)):
        optimizer.lr = 0.05 / (1 + 0.01 * i)
        train_step(model, optimizer, loss_fn, x, y)
        monitor.step()


def training_with_no_grad_evaluation(monitor, iterations, evaluate_every=10):
    model, optimizer, loss_fn = setup()
    held_out = list(batches(3, seed=7))
    for i, (x, y) in enumerate(batches(iterations)):
        train_step(model, optimizer, loss_fn, x, y)
        monitor.step()
        if (i + 1) % evaluate_every == 0:
            model.eval()
            with ndl.no_grad():
                for x_eval, y_eval in held_out:
                    loss_fn(model(x_eval), y_eval)
                    monitor.step()
            model.train()


def long_run(monitor, iterations):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    optimizer = optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.SoftmaxLoss()
    x = ndl.Tensor(np.random.randn(4, 4).astype("float32"), requires_grad=False)
    y = ndl.Tensor(np.array([0, 1, 0, 1]), dtype="int64", requires_grad=False)
    for _ in range(iterations):
        train_step(model, optimizer, loss_fn, x, y)
        monitor.step()


HEALTHY = {
    "gradient_accumulation": (gradient_accumulation, 200),
    "summed_micro_batches_step_per_micro_batch": (summed_micro_batches, 300),
    "summed_micro_batches_step_per_optimizer_step": (
        lambda monitor, n: summed_micro_batches(monitor, n, step_per="optimizer_step"),
        100,
    ),
    "truncated_bptt": (truncated_bptt, 200),
    "float_accumulation": (float_accumulation, 200),
    "detached_accumulation": (detached_accumulation, 200),
    "detached_moving_average": (detached_moving_average, 200),
    "detached_lists": (detached_lists, 200),
    "adam_state_on_first_step": (adam_state_on_first_step, 200),
    "batch_norm_dropout_with_mode_switches": (batch_norm_dropout_with_mode_switches, 200),
    "partial_last_batch": (partial_last_batch, 20),
    "learning_rate_every_step": (learning_rate_every_step, 200),
    "training_with_no_grad_evaluation": (training_with_no_grad_evaluation, 200),
    "evaluation_with_no_grad": (evaluation_with_no_grad, 200),
    "long_run_3000": (long_run, 3000),
}
