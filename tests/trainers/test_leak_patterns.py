"""Every leak pattern warns once, early, at the user's line; every healthy loop stays silent."""
import warnings

import pytest

import leak_loops
from leak_loops import LEAK_FROM, marked_line
from recording import TracingMonitor
from trainers import DiagnosticWarning, GraphLeakWarning, MemoryMonitor, NoGradWarning

ITERATIONS = 60
EARLY = 10  # the first warning must come within this many iterations of the leak's start


def run_recorded(loop, iterations=ITERATIONS, warn="once", **loop_options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with TracingMonitor(caught, warn=warn) as monitor:
            loop(monitor, iterations, **loop_options)
    return monitor, monitor.arrivals


def assert_names_line(warning, site_name):
    line = marked_line(site_name)
    assert warning.filename == leak_loops.__file__
    assert warning.lineno == line
    assert f"{leak_loops.__file__}:{line}:" in str(warning.message)


LEAKS = [
    # (loop, the marked line the warning names, a word the message must contain)
    ("accumulate_assign", "accumulate_assign", "total = total + loss.detach()"),
    ("accumulate_iadd", "accumulate_iadd", "total_loss += loss.detach()"),
    ("losses_in_list", "losses_in_list", "`epoch_losses`"),
    ("predictions_in_list", "predictions_in_list", "`predictions`"),
    ("loss_moving_average", "loss_moving_average", ".detach()"),
    ("hidden_state", "hidden_state", "hidden = hidden.detach()"),
    ("running_mean", "running_mean", "self.running_mean = ("),
]


@pytest.mark.parametrize("loop_name, site_name, fix", LEAKS, ids=[leak[0] for leak in LEAKS])
def test_leak_warns_once_early_at_the_users_line(loop_name, site_name, fix):
    _, arrivals = run_recorded(leak_loops.LEAKY[loop_name])
    assert len(arrivals) == 1, [str(w.message) for _, w in arrivals]
    iteration, warning = arrivals[0]
    assert warning.category is GraphLeakWarning
    assert LEAK_FROM <= iteration < LEAK_FROM + EARLY
    assert_names_line(warning, site_name)
    assert fix in str(warning.message)
    assert "graph leak" in str(warning.message)


def test_container_leak_names_the_list_and_the_line_making_its_tensors():
    _, arrivals = run_recorded(leak_loops.losses_in_list)
    message = str(arrivals[0][1].message)
    assert "The container `epoch_losses` holds" in message
    assert f"leak_loops.py:{marked_line('losses_made')}:" in message


def test_warn_always_repeats_the_warning():
    _, arrivals = run_recorded(leak_loops.accumulate_assign, warn="always")
    assert len(arrivals) >= 2
    assert all(w.category is GraphLeakWarning and w.lineno == marked_line("accumulate_assign") for _, w in arrivals)


def test_warn_error_raises_at_the_iteration_once_would_warn():
    _, arrivals = run_recorded(leak_loops.accumulate_assign)
    warned_at = arrivals[0][0]
    with MemoryMonitor(warn="error") as monitor:
        with pytest.raises(GraphLeakWarning, match="total = total \\+ loss"):
            leak_loops.accumulate_assign(monitor, ITERATIONS)
    assert len(monitor.history) - 1 == warned_at


def test_warn_ignore_never_warns_but_records():
    monitor, arrivals = run_recorded(leak_loops.accumulate_assign, warn="ignore")
    assert arrivals == []
    assert len(monitor.history) == ITERATIONS
    assert monitor.history[-1].live_spent_nodes > monitor.history[LEAK_FROM].live_spent_nodes


def test_warnings_filter_error_turns_the_warning_into_an_exception():
    with warnings.catch_warnings():
        warnings.simplefilter("error", GraphLeakWarning)
        with MemoryMonitor() as monitor:
            with pytest.raises(GraphLeakWarning):
                leak_loops.accumulate_iadd(monitor, ITERATIONS)
    assert LEAK_FROM <= len(monitor.history) - 1 < LEAK_FROM + EARLY


def test_warnings_filter_ignore_silences_it():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", DiagnosticWarning)
        with MemoryMonitor() as monitor:
            leak_loops.accumulate_iadd(monitor, ITERATIONS)
    assert caught == []


def test_pytest_warns_sees_the_leak():
    with pytest.warns(GraphLeakWarning, match="graph leak"):
        with MemoryMonitor() as monitor:
            leak_loops.accumulate_assign(monitor, ITERATIONS)


# ---- evaluation without no_grad -----------------------------------------------------------------
def test_evaluation_without_no_grad_warns_with_nodes_and_bytes():
    _, arrivals = run_recorded(leak_loops.evaluation_without_no_grad)
    assert len(arrivals) == 1
    iteration, warning = arrivals[0]
    assert warning.category is NoGradWarning
    assert iteration < EARLY
    assert_names_line(warning, "evaluation_forward")
    message = str(warning.message)
    assert "no_grad missing" in message and "with needle.no_grad():" in message
    assert "each built 3 graph nodes" in message
    assert " KB)" in message or " B)" in message


def test_evaluation_with_no_grad_is_silent():
    monitor, arrivals = run_recorded(leak_loops.evaluation_with_no_grad, iterations=200)
    assert arrivals == []
    assert all(record.nodes_created == 0 for record in monitor.history)


# ---- healthy loops ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(leak_loops.HEALTHY))
def test_healthy_loop_never_warns(name):
    loop, iterations = leak_loops.HEALTHY[name]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with MemoryMonitor(warn="always") as monitor:
            loop(monitor, iterations)
    assert [str(w.message) for w in caught if issubclass(w.category, DiagnosticWarning)] == []
    assert len(monitor.history) >= iterations
