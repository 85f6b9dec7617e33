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


# ---- every kind of evaluation a loop runs, and its correct twin ---------------------------------
def _only_warning(loop, iterations, **options):
    _, arrivals = run_recorded(loop, iterations, **options)
    assert len(arrivals) == 1, [(i, str(w.message)) for i, w in arrivals]
    iteration, warning = arrivals[0]
    assert warning.category is NoGradWarning
    return iteration, warning


@pytest.mark.parametrize("every", [1, 5])
def test_a_greedy_predict_helper_called_in_the_loop_is_warned_at_the_call(every):
    iteration, warning = _only_warning(wasted_loops.sampler_in_loop, 12 * every, every=every)
    assert iteration <= 2 * every  # the predictions run at 0, every, 2 * every
    assert (warning.filename, warning.lineno) == (wasted_loops.__file__, wasted_loops.site("sampler"))
    assert "with needle.no_grad():" in str(warning.message) and "@needle.no_grad" in str(warning.message)


@pytest.mark.parametrize("epoch_length", [4, 9])
def test_an_early_stopping_check_on_each_epochs_last_batch_is_warned(epoch_length):
    iteration, warning = _only_warning(wasted_loops.early_stopping, 6 * epoch_length, batches_per_epoch=epoch_length)
    assert iteration <= 3 * epoch_length - 1  # the checks run at the ends of epochs 0, 1, 2
    assert warning.lineno == wasted_loops.site("early_stop")
    assert "graph nodes" in str(warning.message) and "with needle.no_grad():" in str(warning.message)


def test_a_rare_evaluation_is_warned_by_its_third_occurrence():
    # every 100 steps: longer than one watch, so the second watch lasts twice the gap seen
    iteration, warning = _only_warning(wasted_loops.eval_every, 320, k=100)
    assert iteration <= 200 and warning.lineno == wasted_loops.site("eval_every")


@pytest.mark.parametrize("every", [2, 5])
def test_iterations_that_only_evaluate_are_warned_once_with_the_evaluation_loop_fix(every):
    iteration, warning = _only_warning(wasted_loops.validation_iterations, 12 * every, every=every)
    assert iteration <= 3 * every - 1
    assert warning.lineno == wasted_loops.site("val_iteration")
    message = str(warning.message)
    assert f"The model is called at {wasted_loops.__file__}:{wasted_loops.site('val_iteration')}:" in message
    assert "wrap the evaluation loop in `with needle.no_grad():`" in message


def test_one_evaluation_run_is_one_occurrence_under_warn_always():
    import patterns

    _, arrivals = run_recorded(patterns.eval_argmax, 12, warn="always")
    assert len(arrivals) == 1 and arrivals[0][1].category is NoGradWarning


def test_a_frozen_feature_extractor_run_with_grad_on_is_warned_at_its_forward():
    iteration, warning = _only_warning(wasted_loops.frozen_features, 20)
    assert iteration <= 2
    assert (warning.filename, warning.lineno) == (wasted_loops.__file__, wasted_loops.site("frozen"))
    message = str(warning.message)
    assert "no optimizer updates" in message and "2 gradients" in message  # the frozen layer's weight and bias
    assert "Fix: run that call under `with needle.no_grad():`" in message


def test_a_frozen_model_under_warn_always_is_warned_again_less_and_less_often():
    _, arrivals = run_recorded(wasted_loops.frozen_features, 40, warn="always")
    iterations = [i for i, _ in arrivals]
    assert iterations[0] <= 2 and len(iterations) >= 3
    gaps = [b - a for a, b in zip(iterations, iterations[1:])]
    assert gaps == sorted(gaps) and gaps[0] < gaps[-1]


@pytest.mark.parametrize("loop, options", [
    (wasted_loops.sampler_in_loop, {"decorated": True}),  # @ndl.no_grad on the helper
    (wasted_loops.early_stopping, {"no_grad": True}),  # .item() on the training loss, no_grad on the check
    (wasted_loops.validation_iterations, {"no_grad": True}),
    (wasted_loops.training_accuracy, {"detach": True}),  # the training logits, .detach()ed
    (wasted_loops.eval_every, {"k": 1, "no_grad": True}),
    (wasted_loops.frozen_features, {"fix": "no_grad"}),
    (wasted_loops.frozen_features, {"fix": "requires_grad"}),  # requires_grad=False: no gradient, nothing wasted
    (wasted_loops.plain_autograd, {}),  # parameters updated by hand: no optimizer steps
])
def test_each_correct_twin_is_silent(loop, options):
    _, arrivals = run_recorded(loop, 30, warn="always", **options)
    assert arrivals == []


def test_a_detached_frozen_output_still_records_a_graph_and_is_warned_there():
    iteration, warning = _only_warning(wasted_loops.frozen_features, 20, fix="detach")
    assert warning.lineno == wasted_loops.site("frozen_detach")
    assert "freed without any backward()" in str(warning.message)


def test_plain_autograd_with_an_optimizer_alive_elsewhere_is_silent():
    keep = ndl.optim.SGD([ndl.nn.Parameter(ndl.Tensor([1.0]))], lr=0.1)  # an old optimizer, still alive
    _, arrivals = run_recorded(wasted_loops.plain_autograd, 30, warn="always")
    assert arrivals == [] and keep.params


def test_small_graphs_are_never_warned_and_summarised_once_with_their_line():
    monitor, arrivals = run_recorded(wasted_loops.metrics_on_logits, 30, warn="always")
    assert arrivals == []
    summary = monitor.summary()
    small = [line for line in summary.splitlines() if "small graphs" in line]
    assert len(small) == 1
    assert f"{wasted_loops.__file__}:{wasted_loops.site('metric_on_logits')}" in small[0]
    wasted = monitor.diagnosis.wasted
    # one float32 (8, 3) exp a step, freed when the next step rebinds it (the last is still alive)
    assert wasted.small_nodes == 29 and wasted.small_bytes == 29 * 8 * 3 * 4
    assert "29 graph nodes (2.78 KB)" in small[0] and "harmless" in small[0]


def test_a_frozen_backbone_in_a_trainer_is_warned_at_the_models_line():
    caught = wasted_loops.frozen_backbone_in_trainer()
    assert [(w.filename, w.lineno) for w in caught] == [(wasted_loops.__file__, wasted_loops.site("frozen_backbone"))]
    assert "no optimizer updates" in str(caught[0].message)


def test_a_frozen_backbone_under_no_grad_in_a_trainer_is_silent():
    assert wasted_loops.frozen_backbone_in_trainer(no_grad=True) == []
