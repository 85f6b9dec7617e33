"""The leak diagnosis's real states, one test each: how a state is entered, what its deadline does,
and how it is left (trainers/diagnosis/machine.py draws the diagram)."""
import sys
import types
import warnings

import numpy as np

import needle as ndl
from needle import nn, optim
import patterns
from trainers import GraphLeakWarning, MemoryMonitor, NoGradWarning
from trainers.diagnosis.evidence import CONTAINER, GROWTH, Finding, Suspicion
from trainers.diagnosis.machine import KEPT_LOSSES_WAIT, AwaitingAddingLine, LeakDiagnosis


class StateTrace(MemoryMonitor):
    """A MemoryMonitor that notes, after every step, the diagnosis's state and its deadline."""

    def __init__(self):
        super().__init__(warn="always")
        self.trace = []  # (iteration, state name, deadline)
        self.arrivals = []  # (iteration, category)
        self._caught = None

    def step(self):
        seen = len(self._caught)
        record = super().step()
        current = self.diagnosis.current
        self.trace.append((record.iteration, current.name, current.deadline))
        self.arrivals.extend((record.iteration, w.category) for w in self._caught[seen:])
        return record

    def run(self, loop, *arguments):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self._caught = caught
            loop(self, *arguments)
        return self

    def entered(self, name):
        """``(iteration, deadline)`` at the first step that left the diagnosis in state ``name``."""
        return next((i, deadline) for i, state, deadline in self.trace if state == name)

    def left(self, name):
        """The iteration of the first step after ``name`` that is in another state."""
        start = next(n for n, (_, state, _) in enumerate(self.trace) if state == name)
        return next(i for i, state, _ in self.trace[start:] if state != name)


def fake_record(iteration, backward_calls=1, live_nodes=0, nodes_created=0):
    """The fields of a StepRecord the diagnosis reads, for driving a state without a loop."""
    return types.SimpleNamespace(iteration=iteration, backward_calls=backward_calls, live_nodes=live_nodes,
                                 nodes_created=nodes_created, nodes_freed=0, live_bytes=0, live_spent_nodes=0)


def test_watching_has_no_deadline_and_stays_in_a_healthy_loop():
    monitor = StateTrace().run(healthy, 40)
    assert {(state, deadline) for _, state, deadline in monitor.trace} == {("watching", None)}
    assert monitor.arrivals == []


def healthy(monitor, iterations):
    model, opt, loss_fn = patterns.classifier()
    for x, y in patterns.data(iterations):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        monitor.step()


def test_locating_growth_is_entered_on_growth_and_left_with_a_report():
    monitor = StateTrace().run(patterns.curve_every, 30, 1)
    entered, deadline = monitor.entered("locating_growth")
    assert patterns.START <= entered and deadline == entered + 2 + 8  # the slowest cadence it waits for
    reported = monitor.left("locating_growth")
    assert (reported, GraphLeakWarning) in monitor.arrivals and reported < deadline
    assert dict((i, state) for i, state, _ in monitor.trace)[reported] == "watching"


def test_locating_growth_dismisses_at_its_deadline_and_quiets_only_that_growth():
    diagnosis = LeakDiagnosis(emit=lambda *warning: pytest_fail(warning))
    frame = sys._getframe()
    diagnosis.observe(fake_record(0), frame)
    suspicion = Suspicion(GROWTH, 0, nodes=4, every=1)
    diagnosis.suspected(suspicion, fake_record(0))
    assert diagnosis.state == "locating_growth" and diagnosis.locator.active
    deadline = diagnosis.current.deadline
    for iteration in range(1, deadline):
        diagnosis.observe(fake_record(iteration), frame)  # nothing outlives an iteration
        assert diagnosis.state == "locating_growth"
    diagnosis.observe(fake_record(deadline), frame)
    assert diagnosis.state == "watching" and not diagnosis.locator.active
    assert diagnosis.quiet.silences(Suspicion(GROWTH, deadline + 1, nodes=4))  # the same growth: quiet
    assert not diagnosis.quiet.silences(Suspicion(GROWTH, deadline + 1, nodes=9))  # another: located at once


def pytest_fail(warning):
    raise AssertionError(f"nothing should be reported: {warning}")


def evaluation_without_no_grad(monitor, iterations):
    model, opt, loss_fn = patterns.classifier()
    for i, (x, y) in enumerate(patterns.data(iterations)):
        if i < 10:
            opt.reset_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        else:
            model(x).numpy().argmax(axis=1)  # an evaluation, grad mode on
        monitor.step()


def test_locating_forward_lasts_one_iteration_and_reports_an_evaluation():
    monitor = StateTrace().run(evaluation_without_no_grad, 16)
    entered, deadline = monitor.entered("locating_forward")
    assert entered == 10 and deadline == 11  # one iteration tells
    assert monitor.left("locating_forward") == 11 and (11, NoGradWarning) in monitor.arrivals


def forward_through_no_weight(monitor, iterations):
    model, opt, loss_fn = patterns.classifier()
    for i, (x, y) in enumerate(patterns.data(iterations)):
        if i < 10:
            opt.reset_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        else:
            z = ndl.Tensor(x.numpy())
            (z * 2 + 1).numpy()  # a graph through no weight, dropped
        monitor.step()


def test_locating_forward_dismisses_at_its_deadline():
    monitor = StateTrace().run(forward_through_no_weight, 16)
    entered, deadline = monitor.entered("locating_forward")
    assert monitor.left("locating_forward") == deadline == entered + 1
    assert monitor.arrivals == []


def kept_losses(monitor, iterations, micro=4, backward=True):
    """Micro-batch losses kept in a list for one backward() (or never backpropagated)."""
    model, opt, loss_fn = patterns.classifier()
    pending = []
    for i, (x, y) in enumerate(patterns.data(iterations)):
        pending.append(loss_fn(model(x), y) / micro)
        if backward and len(pending) == micro:
            opt.reset_grad()
            sum(pending[1:], pending[0]).backward()
            opt.step()
            pending = []
        monitor.step()
    return pending


def test_awaiting_backward_is_left_when_a_backward_uses_the_kept_losses():
    monitor = StateTrace().run(kept_losses, 12)
    entered, deadline = monitor.entered("awaiting_backward")
    assert deadline == entered + KEPT_LOSSES_WAIT
    assert monitor.left("awaiting_backward") == 3  # the 4th micro-batch's backward(): accumulation
    assert monitor.arrivals == []


def test_awaiting_backward_reports_at_its_deadline_when_no_backward_comes():
    monitor = StateTrace().run(lambda m, n: kept_losses(m, n, backward=False), 24)
    entered, deadline = monitor.entered("awaiting_backward")
    assert monitor.left("awaiting_backward") == deadline
    assert (deadline, NoGradWarning) in monitor.arrivals


def lecture_trap(monitor, iterations):
    sum_loss = 0
    for _ in range(iterations):
        x = ndl.Tensor([2.0])
        sum_loss = sum_loss + x * x
        monitor.step()


def test_awaiting_chain_backward_locates_the_chain_at_its_deadline():
    monitor = StateTrace().run(lecture_trap, 12)
    entered, deadline = monitor.entered("awaiting_chain_backward")
    assert entered == 1 and deadline == entered + 4
    assert monitor.left("awaiting_chain_backward") == deadline
    assert (deadline, GraphLeakWarning) in monitor.arrivals


def summed_raw_weights(monitor, iterations, micro=3):
    """A model of plain tensors (no Parameter, no .grad yet), three losses summed before one backward()."""
    rng = np.random.default_rng(0)
    w = ndl.Tensor(rng.standard_normal((6, 3)).astype("float32"))
    total = None
    for i, (x, _) in enumerate(patterns.data(iterations)):
        loss = (x @ w).sum()
        total = loss if total is None else total + loss
        if (i + 1) % micro == 0:
            total.backward()
            w = ndl.Tensor(w.numpy() - 0.01 * w.grad.numpy())
            total = None
        monitor.step()


def test_awaiting_chain_backward_is_left_when_a_backward_comes():
    monitor = StateTrace().run(summed_raw_weights, 12)
    entered, deadline = monitor.entered("awaiting_chain_backward")
    assert monitor.left("awaiting_chain_backward") == 2 < deadline  # the third loss's backward()
    assert monitor.arrivals == []


class Writer:
    def __init__(self):
        self.scalars = []

    def add_scalar(self, value):
        self.scalars.append(value)  # adding line


def writer_loop(monitor, iterations):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt, loss_fn, writer = optim.SGD(model.parameters(), lr=0.05), nn.SoftmaxLoss(), Writer()
    for x, y in patterns.data(iterations):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        writer.add_scalar(loss)
        monitor.step()


def test_awaiting_adding_line_catches_the_line_as_it_runs():
    monitor = StateTrace().run(writer_loop, 30)
    entered, deadline = monitor.entered("awaiting_adding_line")
    left = monitor.left("awaiting_adding_line")
    assert left < deadline and (left, GraphLeakWarning) in monitor.arrivals
    assert monitor.last_finding.container_name == "self.scalars"


def test_awaiting_adding_line_reports_without_the_line_at_its_deadline():
    issued = []
    diagnosis = LeakDiagnosis(emit=lambda message, category, key, site: issued.append((message, category)))
    frame = sys._getframe()
    diagnosis.observe(fake_record(0), frame)
    container = []
    assert diagnosis.watcher.start(container, frame)
    finding = Finding(CONTAINER, None, container_name="container")
    diagnosis.enter(AwaitingAddingLine(Suspicion(GROWTH, 0, nodes=4), finding, 0, cadence=2))
    assert diagnosis.current.deadline == 3
    for iteration in (1, 2):
        diagnosis.observe(fake_record(iteration), frame)
        assert diagnosis.state == "awaiting_adding_line" and issued == []
    diagnosis.observe(fake_record(3), frame)
    assert diagnosis.state == "watching" and not diagnosis.watcher.active
    ((message, category),) = issued
    assert category is GraphLeakWarning and "(the line that adds to it was not found)" in message
