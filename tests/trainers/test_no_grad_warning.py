"""NoGradWarning: a forward through trained weights with grad mode on and no backward(), caught
within 3 such iterations at the line that calls the model; summing for a later backward() is not."""
import pytest

import patterns
from patterns import site
from recording import first_warning, run_recorded
from trainers import NoGradWarning


@pytest.mark.parametrize(
    "loop, marker",
    [
        (patterns.eval_argmax, "eval_argmax"),  # pred = model(x).numpy().argmax(1): dropped at once
        (patterns.eval_float_loss, "eval_float"),  # val += float(loss_fn(model(xv), yv).numpy())
        (patterns.eval_watch, "eval_watch"),  # for x, y in monitor.watch(test_loader): ... .numpy()
        (patterns.eval_kept, "eval_kept"),  # outputs.append(model(x)): kept
    ],
    ids=["argmax", "float_loss", "watch", "kept"],
)
def test_evaluation_without_no_grad(loop, marker):
    iteration, warning = first_warning(loop, 30)
    assert warning.category is NoGradWarning
    assert iteration <= 2  # within 3 such iterations
    assert (warning.filename, warning.lineno) == (patterns.__file__, site(marker))
    message = str(warning.message)
    assert message.startswith("no_grad missing:")
    assert f"The model is called at {patterns.__file__}:{site(marker)}:" in message
    assert "Fix: wrap the evaluation loop in `with needle.no_grad():`" in message


def test_validation_bursts_of_three_between_training_steps_name_the_evaluation_line():
    _, arrivals = run_recorded(patterns.train_with_eval_bursts, 40, burst=3, train_steps=5)
    assert arrivals, "no warning"
    iteration, warning = arrivals[0]
    assert warning.category is NoGradWarning
    assert 5 <= iteration <= 7  # the first burst is iterations 5, 6 and 7
    assert warning.lineno == site("burst_eval") != site("burst_train")
    assert all(w.lineno == site("burst_eval") for _, w in arrivals)


def test_each_burst_warns_again_under_warn_always():
    _, arrivals = run_recorded(patterns.train_with_eval_bursts, 40, warn="always", burst=3, train_steps=5)
    bursts = {iteration // 8 for iteration, _ in arrivals}
    assert len(bursts) == 5 and all(w.category is NoGradWarning for _, w in arrivals)


@pytest.mark.parametrize("name", ["lecture_detach", "micro_batches_summed_64", "gradient_accumulation_list"])
def test_no_parameters_or_summed_for_one_backward_is_silent(name):
    loop, iterations = patterns.HEALTHY[name]
    _, arrivals = run_recorded(loop, iterations, warn="always")
    assert arrivals == []


def test_an_evaluation_burst_in_a_loop_that_sums_micro_batches_is_still_caught():
    _, arrivals = run_recorded(patterns.summed_micro_batches_with_eval_bursts, 100, warn="always")
    assert arrivals and all(w.category is NoGradWarning and w.lineno == site("mixed_eval") for _, w in arrivals)
    first_burst_ends = 20 + 3  # iterations 20, 21 and 22 are the first validation
    assert arrivals[0][0] < first_burst_ends
