"""NoGradWarning from needle's counters: a forward through parameters whose graph is freed with no
backward() through it, in iterations that also train, named at the loop's line within 3 occurrences."""
import pytest

import needle as ndl
import wasted_loops
from recording import run_recorded
from trainers import NoGradWarning


@pytest.mark.parametrize("k", [1, 3, 7])
def test_evaluation_every_k_training_steps_is_warned_at_the_helper_call(k):
    _, arrivals = run_recorded(wasted_loops.eval_every, 8 * k, k=k)
    assert len(arrivals) == 1
    iteration, warning = arrivals[0]
    assert warning.category is NoGradWarning
    assert iteration <= 2 * k  # the evaluations run at 0, k, 2k: warned by the third
    assert (warning.filename, warning.lineno) == (wasted_loops.__file__, wasted_loops.site("eval_every"))
    assert "with needle.no_grad():" in str(warning.message) and "@needle.no_grad" in str(warning.message)


def test_second_forward_for_training_accuracy_is_warned():
    _, arrivals = run_recorded(wasted_loops.training_accuracy, 20)
    assert [w.lineno for _, w in arrivals] == [wasted_loops.site("train_accuracy")]
    assert arrivals[0][0] <= 2


@pytest.mark.parametrize("loop, options", [
    (wasted_loops.eval_every, {"k": 3, "no_grad": True}),
    (wasted_loops.training_accuracy, {"no_grad": True}),
    (wasted_loops.metrics_on_logits, {}),
])
def test_the_correct_twins_and_metrics_on_logits_are_silent(loop, options):
    _, arrivals = run_recorded(loop, 40, warn="always", **options)
    assert arrivals == []


def test_counters_tell_wasted_from_spent_nodes():
    w = ndl.nn.Parameter(ndl.Tensor([1.0, 2.0]))
    before = ndl.autograd.snapshot()
    (w * w).sum().backward()  # spent: not wasted
    middle = ndl.autograd.snapshot()
    float((w * w).sum().numpy())  # freed unspent, reads a parameter: wasted
    after = ndl.autograd.snapshot()
    assert middle.wasted_nodes_freed == before.wasted_nodes_freed
    assert after.wasted_nodes_freed - middle.wasted_nodes_freed == 1  # the multiply reads w; the sum reads it
    assert after.unspent_nodes_freed - middle.unspent_nodes_freed == 2


def test_phase_contract_of_observers():
    calls = []

    class Watch(ndl.graph_observers.GraphObserver):
        def node_made(self, node):
            calls.append(("made", ndl.graph_observers.in_backward()))

        def backward_started(self, output):
            calls.append("started")

        def backward_finished(self, output, traversed):
            calls.append("finished")

    w = ndl.nn.Parameter(ndl.Tensor([1.0, 2.0]))
    watch = Watch()
    ndl.graph_observers.add_observer(watch)
    try:
        y = (w * w).sum()
        y.backward()
    finally:
        ndl.graph_observers.remove_observer(watch)
    assert calls[:2] == [("made", False), ("made", False)]
    assert calls[2] == "started" and calls[-1] == "finished"
    assert all(c == ("made", True) for c in calls[3:-1]) and len(calls) > 4  # gradient graphs


def test_observers_are_per_thread():
    import threading

    seen = []
    ndl.autograd.add_node_observer(seen.append)
    try:
        w = ndl.Tensor([1.0], requires_grad=True)
        thread = threading.Thread(target=lambda: w * w)
        thread.start()
        thread.join()
        assert seen == []
        w * w
        assert len(seen) == 1
    finally:
        ndl.autograd.remove_node_observer(seen.append)
    assert not ndl.graph_observers.observing()


def test_a_trainer_callback_that_evaluates_is_warned_at_the_callbacks_line():
    caught = wasted_loops.callback_evaluation(epochs=4)
    assert [(w.filename, w.lineno) for w in caught] == [(wasted_loops.__file__, wasted_loops.site("callback_eval"))]


def test_a_trainer_callback_that_evaluates_under_no_grad_is_silent():
    assert wasted_loops.callback_evaluation(epochs=4, no_grad=True) == []
