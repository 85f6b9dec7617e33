"""Warnings name the container as the user wrote it and give the fix that matches what the code does."""
import pytest

import patterns
from patterns import START, site
from recording import first_warning, run_recorded
from trainers import GraphLeakWarning


@pytest.mark.parametrize(
    "loop, marker, name, fix",
    [
        (patterns.nested_dict_history, "nested_dict", 'hist["train"]["loss"]',
         'Fix: store a detached value, e.g. `hist["train"]["loss"].append(loss.detach())` or '
         '`hist["train"]["loss"].append(float(loss.numpy()))`'),
        (patterns.attribute_curve, "self_curve", "self.curve",
         "Fix: store a detached value, e.g. `self.curve.append(loss.detach())`"),
        (patterns.extend_two_losses, "extend", "log",
         "Fix: store detached values, e.g. `log.extend([ce.detach(), mse.detach()])`"),
        (patterns.losses_by_step, "setitem", "by_step",
         "Fix: store a detached value, e.g. `by_step[i] = loss.detach()` or `by_step[i] = float(loss.numpy())`"),
    ],
    ids=["nested_dict", "attribute", "extend", "setitem"],
)
def test_container_is_named_by_the_users_expression(loop, marker, name, fix):
    iteration, warning = first_warning(loop, 40)
    assert warning.category is GraphLeakWarning
    assert START <= iteration <= START + 9
    assert warning.lineno == site(marker)
    message = str(warning.message)
    assert f"The container `{name}` holds a tensor with its whole graph" in message
    assert fix in message
    assert "a list" not in message


@pytest.mark.parametrize("state, fix", [
    ("tensor", "`h = h.detach()`"),
    ("tuple", "`h = tuple(s.detach() for s in h)`"),
])
def test_recurrent_state_carried_across_batches(state, fix):
    iteration, warning = first_warning(patterns.recurrent_run, 40, state=state)
    assert warning.category is GraphLeakWarning
    assert START <= iteration <= START + 9
    assert (warning.filename, warning.lineno) == (patterns.__file__, site("recurrent"))  # h = cell(x, h)
    message = str(warning.message)
    assert "feeds back into its forward pass" in message
    assert "Fix: detach the state once per batch, before it is fed to the next forward" in message
    assert fix in message


@pytest.mark.parametrize("state", ["tensor", "tuple"])
def test_truncated_bptt_that_detaches_is_silent(state):
    _, arrivals = run_recorded(patterns.recurrent_run, 120, state=state, detach=True)
    assert arrivals == []


def test_finding_keeps_what_it_drew_of_one_iteration_not_the_nodes():
    # NOTE: deliberate change (issue 18): the finding held the nodes; it now holds them weakly
    # and keeps the text and DOT it drew, so once the loop's list is gone nothing is kept.
    monitor, arrivals = run_recorded(patterns.curve_every, 40, every=1)
    finding = monitor.last_finding
    assert finding is not None and finding.kind == "container"
    assert finding.site == (patterns.__file__, site("curve"))
    assert finding.retained_nodes == ()  # the loop returned: its curve and the graphs are gone
    assert "SoftmaxCrossEntropy" in finding.frozen_text and "— 4 nodes" in finding.frozen_text
    assert finding.frozen_dot.startswith("digraph")
    assert arrivals and START <= finding.iteration < len(monitor.history)


def test_a_healthy_run_keeps_no_finding():
    monitor, arrivals = run_recorded(patterns.bounded_deque, 100)
    assert arrivals == [] and monitor.last_finding is None


def test_the_adding_line_inside_a_helper_method_is_caught_as_it_runs():
    import sys

    trace_before = sys.gettrace()  # a coverage tool's or debugger's, if one runs the tests
    iteration, warning = first_warning(patterns.logged_through_a_helper, 40)
    assert warning.category is GraphLeakWarning
    assert START <= iteration <= START + 9
    assert warning.lineno == site("logger_append")
    message = str(warning.message)
    assert "The container `self.values` holds" in message
    assert "Fix: store a detached value, e.g. `self.values.append(value.detach())`" in message
    assert sys.getprofile() is None  # the profile function used to catch it is gone
    assert sys.gettrace() is trace_before  # and the trace function was never touched


def test_the_adding_line_is_caught_while_a_debugger_or_coverage_tool_holds_the_trace_function():
    import sys

    def tracer(frame, event, arg):  # stands in for pdb's or coverage's trace function
        return None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        _, warning = first_warning(patterns.logged_through_a_helper, 40)
        assert sys.gettrace() is tracer, "the watch replaced the user's trace function"
    finally:
        sys.settrace(previous)
    assert warning.lineno == site("logger_append")
    assert "Fix: store a detached value, e.g. `self.values.append(value.detach())`" in str(warning.message)


def test_a_state_kept_on_the_model_is_named_by_the_line_that_assigns_it():
    iteration, warning = first_warning(patterns.state_kept_on_the_model, 30)
    assert warning.category is GraphLeakWarning
    assert iteration <= 9
    assert warning.lineno == site("stateful")
    assert "`self.hidden = self.hidden.detach()`" in str(warning.message)
