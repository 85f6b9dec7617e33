"""Which plan a call replays, what it returns, and what it does not do again."""
import numpy as np
import pytest

import needle as ndl
import needle.nn as nn
from needle.backend_ndarray import fused_ops

from steps import data, model_and_optimizer, state_arrays, step_function


def batches(batch_size=32, count=4):
    images, labels = data()
    return [(ndl.Tensor(images[i * batch_size : (i + 1) * batch_size]), ndl.Tensor(labels[i * batch_size : (i + 1) * batch_size])) for i in range(count)]


def test_a_new_signature_captures_again_and_the_old_plan_is_replayed_after():
    model, opt = model_and_optimizer()
    step = ndl.compile(step_function(model, opt))
    full, short = batches(32, 2), batches(20, 1)
    step(*full[0])
    step(*full[1])
    assert (step.captures, step.replays) == (1, 1)
    step(*short[0])
    assert (step.captures, step.replays) == (2, 1)
    step(*full[0])
    assert (step.captures, step.replays) == (2, 2)


def test_train_and_eval_select_their_own_plans():
    model, opt = model_and_optimizer()

    @ndl.compile
    def forward(x):
        with ndl.no_grad():
            return model(x)

    x = batches(8, 1)[0][0]
    model.train()
    forward(x)
    model.eval()
    first_eval = forward(x)
    second_eval = forward(x)
    assert forward.captures == 2 and forward.replays == 1
    with ndl.no_grad():
        expected = model(x).numpy()
    assert np.array_equal(second_eval.numpy(), expected)  # eval mode: no dropout, running statistics
    assert np.array_equal(first_eval.numpy(), second_eval.numpy())
    model.train()
    forward(x)
    assert forward.captures == 2 and forward.replays == 2


def test_results_are_graph_free_copies_that_later_calls_do_not_overwrite():
    model, opt = model_and_optimizer()
    step = ndl.compile(step_function(model, opt))
    results = [step(x, y) for x, y in batches()]
    values = [r.numpy().copy() for r in results]
    assert all(r.op is None and not r.inputs and not r.requires_grad for r in results)
    assert len({v.tobytes() for v in values}) == len(values)
    assert [r.numpy().tobytes() for r in results] == [v.tobytes() for v in values]


def test_python_side_effects_happen_only_while_capturing():
    model, opt = model_and_optimizer()
    inner = step_function(model, opt)
    calls = []

    def step(x, y):
        calls.append(1)
        return inner(x, y)

    compiled = ndl.compile(step)
    for x, y in batches():
        compiled(x, y)
    assert len(calls) == 1 and compiled.replays == 3


def test_a_parameter_given_a_new_array_between_calls_is_replayed_with_its_values():
    def run(compiled):
        model, opt = model_and_optimizer()
        step = step_function(model, opt)
        step = ndl.compile(step) if compiled else step
        np.random.seed(4)
        losses = []
        for index, (x, y) in enumerate(batches()):
            if index == 2:
                weight = model.modules[0].weight
                weight.data = ndl.Tensor(weight.numpy() * 0.5)  # a new array, not an in-place update
            losses.append(step(x, y).numpy().tobytes())
        return losses, step

    eager, _ = run(False)
    compiled, step = run(True)
    assert compiled == eager
    assert step.captures == 1  # adopted: the new values copied into the array the plan reads


def test_a_loaded_optimizer_state_takes_effect():
    def run(compiled):
        model, opt = model_and_optimizer("adam")
        step = step_function(model, opt)
        step = ndl.compile(step) if compiled else step
        np.random.seed(4)
        saved = None
        for index, (x, y) in enumerate(batches()):
            if index == 1:
                saved = opt.state_dict()
            if index == 3:
                opt.load_state_dict(saved)
            step(x, y)
        return state_arrays(model, opt)

    eager, compiled = run(False), run(True)
    assert all(eager[name].tobytes() == compiled[name].tobytes() for name in eager)


def test_work_nobody_reads_is_not_replayed():
    """The course backward computes the data batch's gradient; the replay drops that product."""
    model = nn.Linear(6, 3)
    opt = ndl.optim.SGD(model.parameters(), lr=0.1)
    step = ndl.compile(step_function(model, opt))
    x, y = ndl.Tensor(np.ones((4, 6), np.float32)), ndl.Tensor(np.array([0, 1, 2, 0]))
    step(x, y)
    entry = next(iter(step._plans.values()))
    matmuls = [run for run in entry.plan.runs if getattr(getattr(run, "func", None), "__name__", "") == "matmul"]
    assert entry.plan.dropped > 0
    assert len(matmuls) == 2  # forward and the weight's gradient; eager also makes x.grad = out_grad @ W.T


def test_a_label_out_of_range_at_replay_raises_needles_error():
    """The replay stops at the check needle's loss made at capture and runs the call eagerly; the
    Dropout mask the replay drew before the check is given back to numpy's RNG, so the steps after
    draw what eager draws."""
    bad = ndl.Tensor(np.array([0, 1, 2, 3, 9, 0, 1, 2]))

    def run(compiled):
        model, opt = model_and_optimizer()
        step = step_function(model, opt)
        step = ndl.compile(step) if compiled else step
        (x, y), _ = batches(8, 2)
        step(x, y)
        step(x, y)
        with pytest.raises(IndexError, match="label 9"):
            step(x, bad)
        step(x, y)
        step(x, y)
        return state_arrays(model, opt)

    eager, compiled = run(False), run(True)
    assert all(eager[name].tobytes() == compiled[name].tobytes() for name in eager)


def test_compile_works_as_a_decorator_and_on_methods():
    class Runner:
        def __init__(self):
            self.model, self.opt = model_and_optimizer()
            self.loss_fn = nn.SoftmaxLoss()

        @ndl.compile
        def step(self, x, y):
            self.opt.reset_grad()
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            self.opt.step()
            return loss

    runner = Runner()
    for x, y in batches():
        runner.step(x, y)
    assert runner.step.captures == 1 and runner.step.replays == 3


def test_no_grad_selects_its_own_plan():
    """A forward compiled on its own: with gradients enabled its result needs the graph a replay
    does not have (the caller may differentiate it), so that signature runs eagerly, with one
    warning; under no_grad it is captured and replayed."""
    model, opt = model_and_optimizer()
    model.eval()

    @ndl.compile
    def forward(x):
        return model(x)

    x = batches(8, 1)[0][0]
    with pytest.warns(ndl.EagerFallbackWarning, match="runs no backward"):
        with_graph = forward(x)
    assert with_graph.op is not None and forward(x).op is not None
    with ndl.no_grad():
        forward(x)
        forward(x)
    assert forward.captures == 2 and forward.replays == 1


def test_an_indexed_update_is_replayed_as_one_call(monkeypatch):
    """The loss gradient's ``exp[rows, labels] -= scale`` (its numpy calls, without the C kernel) is
    one call, not a gather, a subtract and a scatter."""
    from needle.compiler.indexed_updates import _update_at
    from needle.compiler.recorder import _setitem

    monkeypatch.setattr(ndl.cpu().kernels, "_fused_cross_entropy_gradient", None)
    model, opt = model_and_optimizer()
    step = ndl.compile(step_function(model, opt))
    (x, y), (x2, y2) = batches(8, 2)
    step(x, y)
    step(x2, y2)
    functions = [getattr(run, "func", None) for run in next(iter(step._plans.values())).plan.runs]
    assert functions.count(_update_at) == 1 and _setitem not in functions


@pytest.mark.skipif(not fused_ops.ENABLED, reason=f"the loss's pieces are {fused_ops.describe()}")
def test_a_c_kernel_of_the_loss_is_recorded_as_one_step_of_the_plan():
    """The kernels of fused_ops bypass numpy's dispatch; the capture records each call as one step."""
    model, opt = model_and_optimizer()
    step = ndl.compile(step_function(model, opt))
    (x, y), (x2, y2) = batches(8, 2)
    step(x, y)
    step(x2, y2)
    plan = next(iter(step._plans.values())).plan
    functions = [getattr(run, "func", None) for run in plan.runs]
    assert functions.count(fused_ops.cross_entropy_gradient) == 1
    assert functions.count(fused_ops.shift_rows) == 1
    assert functions.count(fused_ops.relu_backward) == 1


@pytest.mark.skipif(not fused_ops.ENABLED, reason=f"the loss's pieces are {fused_ops.describe()}")
def test_a_c_kernel_on_plain_arrays_during_a_capture_is_not_recorded():
    """The capture hook is global: a kernel call on arrays that are not the capture's (another
    thread's eager step) runs as usual and adds no step to the plan."""
    from needle.compiler.recorder import Recorder

    recorder = Recorder()
    out, gradient, hidden = np.empty(4, np.float32), np.ones(4, np.float32), np.array([1, 0, 2, 0], np.float32)
    recorder.start()
    try:
        done = fused_ops.run(fused_ops.relu_backward, True, out, gradient, hidden)
    finally:
        recorder.stop()
    assert done is not None and done[0].tolist() == [1.0, 0.0, 1.0, 0.0]
    assert recorder.steps == [] and fused_ops.CAPTURE_HOOK is None


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_gradient_clipping_inside_the_step_clips_each_replay_by_its_own_norm(optimizer):
    """clip_grad_norm decides on the norm in Python eagerly; captured, it scales by an array (1
    where the norm is small), so every replay clips by its own step's norm, bitwise as eager."""
    from steps import train

    norms = {}

    def run(compiled):
        model, opt = model_and_optimizer(optimizer)
        loss_fn = nn.SoftmaxLoss()
        seen = norms.setdefault(compiled, [])

        def step(x, y):
            opt.reset_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            seen.append(ndl.optim.clip_grad_norm(model.parameters(), 1.0))
            opt.step()
            return loss

        step = ndl.compile(step) if compiled else step
        losses = train(step, opt, 12)
        return losses, state_arrays(model, opt), step

    eager_losses, eager_state, _ = run(False)
    losses, state, compiled = run(True)
    assert min(norms[False]) < 1.0 < max(norms[False]), "some steps clipped, some not"
    assert compiled.replays == 10 and compiled.captures == 2  # the full batches and the partial one
    assert norms[True] == norms[False][:1] + norms[False][4:5], "the norms the captures returned"
    assert [a.tobytes() for a in eager_losses] == [a.tobytes() for a in losses]
    assert all(eager_state[name].tobytes() == state[name].tobytes() for name in eager_state)


def test_a_new_signature_captures_when_two_gradients_share_an_array():
    """After ``backward(create_graph=False)`` of ``a + b`` both leaves' ``.grad`` are one array (as
    an LSTM's two biases'); a capture that finds it in two slots traces it once."""
    a = nn.Parameter(ndl.Tensor(np.ones(3, np.float32)))
    b = nn.Parameter(ndl.Tensor(np.ones(3, np.float32)))
    opt = ndl.optim.SGD([a, b], lr=0.1)

    @ndl.compile
    def step(x):
        opt.reset_grad()
        loss = ((x * (a + b)).sum(axes=1)).sum()
        loss.backward(create_graph=False)
        opt.step()
        return loss

    step(ndl.Tensor(np.ones((2, 3), np.float32)))
    step(ndl.Tensor(np.ones((2, 3), np.float32)))
    assert a.grad.cached_data.raw is b.grad.cached_data.raw, "the shared array this test is about"
    step(ndl.Tensor(np.ones((4, 3), np.float32)))  # a new signature: a second capture
    assert (step.captures, step.replays) == (2, 1)
    np.testing.assert_allclose(a.numpy(), 1 - 0.1 * (2 + 2 + 4))


def test_the_capturing_threads_new_arrays_are_the_captures_and_other_threads_are_their_own():
    import threading

    from needle.compiler.recorder import Recorder
    from needle.compiler.traced_array import TracedArray

    zeros, made = np.zeros, {}
    recorder = Recorder()
    recorder.start()
    try:
        mine = np.zeros(3)
        worker = threading.Thread(target=lambda: made.setdefault("loader", np.zeros(3)))  # a data loader's
        worker.start()
        worker.join()
        mine[1] = 5.0  # an assignment into the step's own array: recorded
    finally:
        recorder.stop()
    assert isinstance(mine, TracedArray) and type(made["loader"]) is np.ndarray and np.zeros is zeros
    mine.view(np.ndarray)[:] = -1
    for step in recorder.steps:
        step.run()
    assert mine.view(np.ndarray).tolist() == [0.0, 5.0, 0.0], "refilled, then the assignment, at a replay"


def test_work_that_reads_nothing_that_varies_is_done_once_at_capture():
    """The seed of ones a backward pass starts from (and what is computed from it alone) is the same
    at every replay: the plan keeps the capture's values instead of recomputing them."""
    model, opt = model_and_optimizer()
    step = ndl.compile(step_function(model, opt))
    (x, y), = batches(8, 1)
    step(x, y)
    plan = next(iter(step._plans.values())).plan
    assert plan.constant >= 1


def test_an_evaluation_compiled_between_eager_training_steps_replays():
    """An evaluation compiled on its own, between eager training steps that replace BatchNorm's
    running statistics by new tensors: those are adopted (their values copied into the tensors
    the plan reads), so every call after the first replays, with eager's values."""
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(12, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 4))
    opt = ndl.optim.SGD(model.parameters(), lr=0.1)
    evaluate = ndl.compile(lambda x: _without_grad(model, x))
    (x, y), = batches(8, 1)
    for index in range(6):
        model.train()
        opt.reset_grad()
        nn.SoftmaxLoss()(model(x), y).backward()
        opt.step()
        model.eval()
        got = evaluate(x)
        assert got.numpy().tobytes() == model(x).numpy().tobytes()
        if index == 0:
            captured_mean = model.modules[1].running_mean
    assert evaluate.captures == 1 and evaluate.replays == 5
    assert model.modules[1].running_mean is captured_mean, "the tensor the plan reads, holding eager's values"


def test_a_function_that_captures_at_every_call_keeps_few_plans_and_says_why_once():
    """Arguments of a new shape at every call: every call captures. The values stay eager's; the
    plans kept are bounded; one RecaptureWarning says why."""
    import warnings

    from needle.compiler.compiled import PLANS_KEPT

    np.random.seed(0)
    model = nn.Sequential(nn.Linear(12, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 4))
    model.eval()
    evaluate = ndl.compile(lambda x: model(x))
    images, _ = data()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for size in range(1, PLANS_KEPT + 5):
            x = ndl.Tensor(images[:size])
            assert evaluate(x).numpy().tobytes() == model(x).numpy().tobytes()
    assert evaluate.captures == PLANS_KEPT + 4 and len(evaluate._plans) == PLANS_KEPT
    recaptures = [w for w in caught if issubclass(w.category, ndl.RecaptureWarning)]
    assert len(recaptures) == 1 and "arguments of a new shape" in str(recaptures[0].message)


def _without_grad(model, x):
    with ndl.no_grad():
        return model(x)
