"""Leaks are found from trends: at any cadence up to every 8th iteration, late in a run, and
whether or not a backward() ever went through the kept graph."""
import pytest

import needle as ndl

import patterns
from patterns import START, site
from recording import first_warning
from trainers import GraphLeakWarning


def latest_allowed(every, start=START):
    """Within 10 iterations when the growth recurs at least every 4th iteration, else by the third
    growth (seen one iteration after it is made, when the local holding it lets go)."""
    return start + 9 if every <= 4 else start + 2 * every + 1


@pytest.mark.parametrize("every", [1, 2, 3, 4, 5, 6, 7, 8])
def test_intermittent_progress_sum_warns_as_an_accumulation(every):
    iteration, warning = first_warning(patterns.progress_sum_every, START + 4 * every + 12, every=every)
    assert warning.category is GraphLeakWarning
    assert START <= iteration <= latest_allowed(every)
    assert (warning.filename, warning.lineno) == (patterns.__file__, site("progress_sum"))
    message = str(warning.message)
    assert "Fix: accumulate a detached value: `cumulative += loss.detach()`" in message
    assert "`cumulative += float(loss.numpy())`" in message
    assert "truncated back-propagation" not in message  # advice from what the code does, not from a name


@pytest.mark.parametrize("every", [1, 2, 3, 4, 5, 6, 7, 8])
def test_intermittent_curve_append_warns_as_a_container(every):
    iteration, warning = first_warning(patterns.curve_every, START + 4 * every + 12, every=every)
    assert warning.category is GraphLeakWarning
    assert START <= iteration <= latest_allowed(every)
    assert warning.lineno == site("curve")
    message = str(warning.message)
    assert "The container `curve` holds" in message
    assert "Fix: store a detached value, e.g. `curve.append(loss.detach())` or `curve.append(float(loss.numpy()))`" in message
    if every > 1:
        assert f"every {every} iterations, about 4 graph nodes" in message


@pytest.mark.parametrize("every", [1, 3])
def test_a_leak_starting_late_is_caught_as_fast(every):
    start = 400
    iteration, warning = first_warning(patterns.progress_sum_every, start + 20, every=every, start=start)
    assert start <= iteration <= latest_allowed(every, start)
    assert warning.lineno == site("progress_sum")


def test_graphs_no_backward_traverses_in_a_loop_that_trains():
    iteration, warning = first_warning(patterns.kept_for_confusion_matrix, 40)
    assert warning.category is GraphLeakWarning
    assert START <= iteration <= START + 9
    assert warning.lineno == site("kept")
    message = str(warning.message)
    assert "that no backward() has used" in message
    assert "The container `kept` holds" in message
    assert "Fix: store a detached value, e.g. `kept.append(model(x).detach())` or `kept.append(model(x).numpy())`" in message


def lecture_leak(monitor, iterations):
    x = ndl.Tensor([2.0], requires_grad=True)
    sum_loss = 0
    for _ in range(iterations):
        sum_loss = sum_loss + x * x  # site: lecture_leak
        monitor.step()


def test_the_lectures_loop_without_backward_warns_within_the_usual_latency():
    # NOTE: a deliberate change (issue 18): the sum reads no weight, so it cannot be 64 micro-batches
    # summed for one backward(); it was warned at iteration ~81, now a few iterations in.
    iteration, warning = first_warning(lecture_leak, 100)
    assert warning.category is GraphLeakWarning
    assert iteration <= 8
    assert warning.lineno == lecture_line()
    message = str(warning.message)
    assert "that no backward() has used" in message
    assert "Fix: accumulate a detached value: `sum_loss = sum_loss + (x * x).detach()`" in message


def lecture_line():
    with open(__file__) as handle:
        return next(n for n, text in enumerate(handle, 1) if text.rstrip().endswith("# site: lecture_leak"))
