"""``ndl.compile(model)``, as ``torch.compile(model)`` is written, and steps given as partials.

- For inference (under ``no_grad``), the module is the compiled function's state: its
  attributes select the plan (``eval()``), its replaced arrays are adopted, its values bitwise.
- Trained through (``loss_fn(compiled(x), y).backward()``), a replay's graph-free output would
  train nothing: the call runs eagerly, its output keeps its graph, and one warning says how to
  compile the whole step instead.
- The wrapper gives the module's attributes (``parameters()``, ``eval()``, ``training``).
"""
import functools
import warnings

import numpy as np
import pytest

import needle as ndl
import needle.nn as nn
from needle.compiler.compiled import NUMPY_MAJOR
from steps import data, model_and_optimizer, state_arrays, step_function, train

pytestmark = pytest.mark.skipif(NUMPY_MAJOR < 2, reason="ndl.compile needs numpy 2")


def batch(index, size=16):
    images, labels = data()
    start = (index * size) % 144
    return ndl.Tensor(images[start : start + size]), ndl.Tensor(labels[start : start + size])


def test_a_compiled_module_for_inference_follows_its_mode_and_its_weights():
    model, _ = model_and_optimizer()
    compiled = ndl.compile(model)
    x = batch(0)[0]
    with ndl.no_grad():
        np.random.seed(3)
        training = [compiled(x).numpy() for _ in range(3)]
        np.random.seed(3)
        assert all(np.array_equal(a, model(x).numpy()) for a in training), "Dropout's masks drawn as eager draws them"
        compiled.eval()
        assert not model.training
        assert np.array_equal(compiled(x).numpy(), model(x).numpy())
        weight = model.modules[0].weight
        weight.data = ndl.Tensor(np.zeros(weight.shape, np.float32))
        assert np.array_equal(compiled(x).numpy(), model(x).numpy())
    assert compiled.captures == 2 and compiled.replays == 3


def test_training_through_a_compiled_module_runs_eagerly_and_says_why_once():
    runs = {}
    for compiled in (False, True):
        model, opt = model_and_optimizer()
        net = ndl.compile(model) if compiled else model
        loss_fn = nn.SoftmaxLoss()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            np.random.seed(5)
            losses = []
            for index in range(6):
                opt.reset_grad()
                loss = loss_fn(net(*batch(index)[:1]), batch(index)[1])
                loss.backward()
                opt.step()
                losses.append(loss.numpy())
        runs[compiled] = (losses, state_arrays(model, opt), caught, net)
    (eager_losses, eager_state, _, _), (losses, state, caught, net) = runs[False], runs[True]
    assert all(np.array_equal(a, b) for a, b in zip(eager_losses, losses))
    assert all(np.array_equal(eager_state[name], state[name]) for name in state), "it trained, as eager"
    messages = [str(w.message) for w in caught if issubclass(w.category, ndl.EagerFallbackWarning)]
    assert len(messages) == 1
    assert "Sequential runs no backward() and returns a tensor that requires grad (result)" in messages[0]
    assert "call loss.backward() and opt.step() inside" in messages[0]
    assert net.captures == 1 and net.replays == 0


def test_a_forward_returning_several_results_names_those_that_need_their_graph():
    model, _ = model_and_optimizer()
    scale = ndl.Tensor(np.float32(2.0))  # a plain tensor: requires grad (the course's default), no parameter

    @ndl.compile
    def forward(x):
        logits = model(x)
        return {"logits": logits, "scaled input": x * scale, "count": 3}

    with pytest.warns(ndl.EagerFallbackWarning, match=r"\(result\['logits'\]\).*under ndl.no_grad\(\)"):
        result = forward(batch(0)[0])
    assert result["logits"].op is not None, "the eager result, with its graph"


def test_a_training_steps_other_results_are_values_and_it_replays():
    """A step that ran backward() is a training step: a result computed after it (the loss times
    the batch size, logits after the update) is a value, and the step is replayed."""
    model, opt = model_and_optimizer()
    train_step = step_function(model, opt)

    @ndl.compile
    def step(x, y):
        loss = train_step(x, y)
        return loss * x.shape[0], model(x)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for index in range(3):
            summed, logits = step(*batch(index))
    assert step.captures == 1 and step.replays == 2 and logits.op is None


def test_the_compiled_wrapper_gives_the_modules_attributes():
    model, _ = model_and_optimizer()
    compiled = ndl.compile(model)
    assert compiled.parameters() == model.parameters()
    assert compiled.training is True
    compiled.eval()
    assert compiled.training is False and model.training is False
    assert "training" not in vars(compiled), "no stale copy of the module's attributes"
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        compiled.missing


def test_a_step_given_as_a_partial_reaches_its_bound_model():
    runs = {}
    for compiled in (False, True):
        model, opt = model_and_optimizer()

        def step(model, opt, x, y):
            return step_function(model, opt)(x, y)

        bound = functools.partial(step, model, opt)
        bound = ndl.compile(bound) if compiled else bound
        losses = train(bound, opt, 6)
        model.eval()
        with ndl.no_grad():
            evaluated = functools.partial(lambda model, x: model(x), model)
            evaluated = ndl.compile(evaluated) if compiled else evaluated
            outputs = [evaluated(batch(i)[0]).numpy() for i in range(2)]
        model.train()
        losses += train(bound, opt, 2, seed=3)
        runs[compiled] = (losses, outputs, state_arrays(model, opt))
    for eager, replayed in zip(runs[False], runs[True]):
        if isinstance(eager, dict):
            assert all(np.array_equal(eager[name], replayed[name]) for name in eager)
        else:
            assert all(np.array_equal(a, b) for a, b in zip(eager, replayed))
