"""ndl.compile on a GPU: the step replays as CUDA graph launches, with the eager step's values.

These run only where CuPy finds a GPU (``benchmarks/gpu_check.sh`` runs them); the graph
bookkeeping without a GPU is in test_cuda_graph.py.
"""
import numpy as np
import pytest

import needle as ndl
import needle.nn as nn

from steps import step_function
from test_course_updates import course_update, forward_backward_of

FEATURES, CLASSES, SAMPLES, STEPS = 12, 4, 150, 50


def _data(device):
    rng = np.random.RandomState(3)
    images = rng.randn(SAMPLES, FEATURES).astype(np.float32)
    labels = rng.randint(0, CLASSES, SAMPLES)
    return device.xp.asarray(images), device.xp.asarray(labels)


def _setup(device, optimizer, dropout=False):
    np.random.seed(0)
    layers = [nn.Linear(FEATURES, 16, device=device), nn.BatchNorm1d(16, device=device), nn.ReLU()]
    if dropout:
        layers.append(nn.Dropout(0.25))
    model = nn.Sequential(*layers, nn.Linear(16, CLASSES, device=device))
    if optimizer == "sgd":
        opt = ndl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    else:
        opt = ndl.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.001)
    return model, opt, step_function(model, opt)


def _train(device, step, opt, steps=STEPS, batch_size=32, lr_change=None, before_step=None):
    """``steps`` steps in order over the data; the last batch of each pass is partial (22 rows).
    ``before_step(index, opt)``, if given, runs before each step."""
    from needle.backend_ndarray import NDArray

    images, labels = _data(device)
    losses, position = [], 0
    for index in range(steps):
        if lr_change is not None and index == lr_change[0]:
            opt.lr = lr_change[1]
        if before_step is not None:
            before_step(index, opt)
        if position >= SAMPLES:
            position = 0
        x = ndl.Tensor.make_const(NDArray.wrap(images[position : position + batch_size], device))
        y = ndl.Tensor.make_const(NDArray.wrap(labels[position : position + batch_size], device))
        position += batch_size
        losses.append(step(x, y))
    return [loss.numpy().copy() for loss in losses]  # read after all steps: no result is overwritten


def _state(model, opt):
    arrays = {f"model.{name}": np.array(value).copy() for name, value in model.state_dict().items()}
    for index, entry in opt.state_dict()["state"].items():
        for name, value in entry.items():
            arrays[f"opt.{index}.{name}"] = np.array(value).copy()
    return arrays


def _compiled_against_eager(device, optimizer, **train_options):
    """Train eagerly, then compiled, from the same start; assert the losses and the state are bitwise
    equal and return the CompiledFunction."""
    model, opt, step = _setup(device, optimizer)
    eager_losses = _train(device, step, opt, **train_options)
    eager_state = _state(model, opt)
    model, opt, step = _setup(device, optimizer)
    compiled = ndl.compile(step)
    losses = _train(device, compiled, opt, **train_options)
    state = _state(model, opt)
    for index, (expected, got) in enumerate(zip(eager_losses, losses)):
        assert expected.tobytes() == got.tobytes(), f"loss of step {index}: {expected} != {got}"
    assert sorted(state) == sorted(eager_state) and any(name.endswith("running_mean") for name in state)
    for name, expected in eager_state.items():
        assert expected.tobytes() == state[name].tobytes(), f"{name}: max difference {np.abs(expected - state[name]).max()}"
    return compiled


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_cuda_replay_equals_eager_over_fifty_steps_with_partial_batches_and_an_lr_change(cuda_device, optimizer):
    compiled = _compiled_against_eager(cuda_device, optimizer, lr_change=(20, 0.03))
    assert compiled.captures == 2 and compiled.replays == STEPS - 2  # full batches, and the partial one


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_cuda_replay_is_one_graph_launch_and_a_loaded_optimizer_state_captures_again(cuda_device, optimizer):
    def reload(index, opt):
        if index == 30:
            opt.load_state_dict(opt.state_dict())  # new state arrays, the same values

    compiled = _compiled_against_eager(cuda_device, optimizer, before_step=reload)
    for entry in compiled._plans.values():
        assert len(entry.segments.items) == 1 and len(entry.updates) == 1, "one launch, the update inside it"
    # the full and the partial batch, each again after the load (their graphs update the old arrays)
    assert compiled.captures == 4


def test_cuda_replay_results_are_copies_and_the_lr_change_takes_effect(cuda_device):
    _, opt, step = _setup(cuda_device, "sgd")
    compiled = ndl.compile(step)
    unchanged = _train(cuda_device, compiled, opt, steps=8)
    _, opt, step = _setup(cuda_device, "sgd")
    changed = _train(cuda_device, ndl.compile(step), opt, steps=8, lr_change=(3, 0.0))
    assert [a.tobytes() for a in unchanged[:4]] == [a.tobytes() for a in changed[:4]]
    assert any(a.tobytes() != b.tobytes() for a, b in zip(unchanged[4:], changed[4:]))
    assert len({loss.tobytes() for loss in unchanged}) > 1  # each returned loss kept its own step's value


def test_cuda_train_and_eval_select_their_own_plans(cuda_device):
    model, opt, step = _setup(cuda_device, "sgd")
    compiled = ndl.compile(step)
    _train(cuda_device, compiled, opt, steps=3)
    model.eval()
    _train(cuda_device, compiled, opt, steps=3)
    assert compiled.captures == 2


def test_cuda_dropout_replays_with_fresh_masks_drawn_as_eager_draws_them(cuda_device):
    import warnings

    model, opt, step = _setup(cuda_device, "sgd", dropout=True)
    np.random.seed(5)
    eager_losses = _train(cuda_device, step, opt, steps=12)
    eager_state = _state(model, opt)
    eager_next_draw = np.random.rand()
    model, opt, step = _setup(cuda_device, "sgd", dropout=True)
    compiled = ndl.compile(step)
    np.random.seed(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ndl.EagerFallbackWarning)
        losses = _train(cuda_device, compiled, opt, steps=12)
    assert np.random.rand() == eager_next_draw, "as many draws as eager: the capture's own are not counted"
    assert compiled.captures == 2 and compiled.replays == 10  # the full batches, and the partial fifth
    assert all(entry.host_uploads is not None for entry in compiled._plans.values())
    assert [loss.tobytes() for loss in losses] == [loss.tobytes() for loss in eager_losses]
    state = _state(model, opt)
    for name, expected in eager_state.items():
        assert expected.tobytes() == state[name].tobytes(), name


def test_cuda_reading_a_value_inside_the_step_falls_back_to_eager_with_the_fix(cuda_device):
    model, opt, step = _setup(cuda_device, "sgd")
    reads = []

    def reads_the_loss(x, y):
        loss = step(x, y)
        reads.append(float(loss.numpy()))
        return loss

    with pytest.warns(ndl.EagerFallbackWarning, match="read it after the call"):
        losses = _train(cuda_device, ndl.compile(reads_the_loss), opt, steps=3)
    assert reads == [float(loss) for loss in losses]  # every call ran eagerly, its read included
    _, opt, step = _setup(cuda_device, "sgd")
    assert [l.tobytes() for l in _train(cuda_device, step, opt, steps=3)] == [l.tobytes() for l in losses]


def test_cuda_a_homework_update_replays_with_the_parameters_keeping_their_arrays(cuda_device):
    """``p.data = p.data - lr * p.grad`` inside the step on the GPU: the new values are copied back
    into the arrays the graph reads (recorded in the graph), so every call after the first replays."""
    runs = {}
    for compiled in (False, True):
        model, opt, _ = _setup(cuda_device, "sgd")
        forward_backward = forward_backward_of(model)

        def step(x, y):
            loss = forward_backward(x, y)
            course_update(model, 0.05)
            return loss

        step = ndl.compile(step) if compiled else step
        runs[compiled] = (_train(cuda_device, step, opt, steps=12), _state(model, opt), step)
    (eager_losses, eager_state, _), (losses, state, step) = runs[False], runs[True]
    assert [a.tobytes() for a in eager_losses] == [a.tobytes() for a in losses]
    assert all(eager_state[name].tobytes() == state[name].tobytes() for name in state)
    assert step.captures == 2 and step.replays == 10


def test_cuda_a_batch_in_a_tuple_replays_and_a_host_batch_falls_back_with_the_fix(cuda_device):
    from needle.backend_ndarray import NDArray

    model, opt, step = _setup(cuda_device, "sgd")
    compiled = ndl.compile(lambda batch: step(*batch))
    images, labels = _data(cuda_device)
    for start in (0, 32, 64):
        x = ndl.Tensor.make_const(NDArray.wrap(images[start : start + 32], cuda_device))
        y = ndl.Tensor.make_const(NDArray.wrap(labels[start : start + 32], cuda_device))
        compiled((x, y))
    assert compiled.captures == 1 and compiled.replays == 2
    host = ndl.compile(lambda x, y: step(ndl.Tensor(x, device=cuda_device), ndl.Tensor(y, device=cuda_device, dtype="int64")))
    rng = np.random.RandomState(1)
    with pytest.warns(ndl.EagerFallbackWarning, match=r"holds host data.*x.to\(ndl.cuda\(\)\)"):
        host(rng.randn(32, FEATURES).astype(np.float32), rng.randint(0, CLASSES, 32))


def test_cuda_a_compiled_model_for_inference_replays_and_follows_eval(cuda_device):
    from needle.backend_ndarray import NDArray

    model, _, _ = _setup(cuda_device, "sgd")
    compiled = ndl.compile(model)
    images, _ = _data(cuda_device)
    x = ndl.Tensor.make_const(NDArray.wrap(images[:32], cuda_device))
    with ndl.no_grad():
        first, second = compiled(x).numpy(), compiled(x).numpy()
        compiled.eval()
        evaluated = compiled(x).numpy()
        expected = model(x).numpy()
    assert first.tobytes() != evaluated.tobytes() and evaluated.tobytes() == expected.tobytes()
    assert compiled.captures == 2 and compiled.replays == 1
