"""Updates written the course's way replay: ``p.data = p.data - lr * grad`` gives a parameter a new
array at every step, and a compiled step keeps the parameter's array (with the new values) so
that its plan stays valid, instead of capturing again at every call.

Both kinds: an optimizer subclass whose ``step()`` is course homework (a host call at replay,
its hyper-parameters read at each call), and an update written inside the step (recorded).
"""
import numpy as np
import pytest

import needle as ndl
import needle.nn as nn
from needle.compiler.compiled import NUMPY_MAJOR
from steps import model_and_optimizer, state_arrays, step_function, train

pytestmark = pytest.mark.skipif(NUMPY_MAJOR < 2, reason="ndl.compile needs numpy 2")


class HomeworkSGD(ndl.optim.Optimizer):
    """SGD with momentum and weight decay as a student writes it: new arrays every step."""

    def __init__(self, params, lr=0.01, momentum=0.0, weight_decay=0.0):
        super().__init__(params)
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.u = {}

    def step(self):
        for param in self.params:
            if param.grad is None:
                continue
            grad = param.grad.data + self.weight_decay * param.data
            previous = self.u.get(param, ndl.init.zeros(*param.shape))
            self.u[param] = (self.momentum * previous + (1 - self.momentum) * grad).detach()
            param.data = param.data - self.lr * self.u[param]


class HomeworkAdam(ndl.optim.Optimizer):
    """Adam with a round trip through numpy, as some students write it."""

    def __init__(self, params, lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8):
        super().__init__(params)
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.t, self.m, self.v = 0, {}, {}

    def step(self):
        self.t += 1
        for index, param in enumerate(self.params):
            grad = param.grad.data
            self.m[index] = (self.beta1 * self.m.get(index, 0) + (1 - self.beta1) * grad).detach()
            self.v[index] = (self.beta2 * self.v.get(index, 0) + (1 - self.beta2) * grad * grad).detach()
            m_hat = self.m[index] / (1 - self.beta1**self.t)
            v_hat = self.v[index] / (1 - self.beta2**self.t)
            update = param.data - self.lr * m_hat / (v_hat**0.5 + self.eps)
            param.data = ndl.Tensor(update.numpy(), dtype=param.dtype)


OPTIMIZERS = {
    "sgd": lambda params: HomeworkSGD(params, lr=0.1, momentum=0.9, weight_decay=0.01),
    "adam": lambda params: HomeworkAdam(params, lr=0.01),
}


def homework_model_and_optimizer(name):
    model, _ = model_and_optimizer()  # the MLP with BatchNorm1d and Dropout
    return model, OPTIMIZERS[name](model.parameters())


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_homework_optimizer_replays_bitwise_with_its_lr_read_at_each_call(name):
    runs = {}
    for compiled in (False, True):
        model, opt = homework_model_and_optimizer(name)
        step = step_function(model, opt)
        if compiled:
            step = ndl.compile(step)
        losses = train(step, opt, 20, lr_change=(12, opt.lr * 0.1))
        runs[compiled] = (losses, [p.numpy() for p in model.parameters()], model.state_dict(), step)
    (eager_losses, eager_params, eager_state, _), (losses, params, state, compiled_step) = runs[False], runs[True]
    assert all(np.array_equal(a, b) for a, b in zip(eager_losses, losses))
    assert all(np.array_equal(a, b) for a, b in zip(eager_params, params))
    assert all(np.array_equal(eager_state[key], state[key]) for key in state)
    assert compiled_step.captures == 2, "the full batches and the partial one: no capture per call"
    assert compiled_step.replays == 18


def forward_backward_of(model):
    """The course's forward and backward, gradients cleared by hand."""
    loss_fn = nn.SoftmaxLoss()

    def forward_backward(x, y):
        for param in model.parameters():
            param.grad = None
        loss = loss_fn(model(x), y)
        loss.backward()
        return loss

    return forward_backward


def course_update(model, lr):
    """The course's update: every parameter given a new array."""
    for param in model.parameters():
        param.data = param.data - lr * param.grad.data


def test_an_update_written_inside_the_step_replays_bitwise():
    def manual_step(model, lr):
        forward_backward = forward_backward_of(model)

        def step(x, y):
            loss = forward_backward(x, y)
            course_update(model, lr)
            return loss

        return step

    runs = {}
    for compiled in (False, True):
        model, opt = model_and_optimizer()
        arrays = [p.cached_data for p in model.parameters()]
        step = manual_step(model, 0.05)
        if compiled:
            step = ndl.compile(step)
        losses = train(step, opt, 14)
        runs[compiled] = (losses, state_arrays(model, opt), step)
        if compiled:
            assert [p.cached_data for p in model.parameters()] == arrays, "each parameter keeps its array"
    (eager_losses, eager_state, _), (losses, state, compiled_step) = runs[False], runs[True]
    assert all(np.array_equal(a, b) for a, b in zip(eager_losses, losses))
    assert all(np.array_equal(eager_state[key], state[key]) for key in state)
    assert compiled_step.captures == 2 and compiled_step.replays == 12


def run_with_change_between_calls(change, compiled):
    """Three steps, ``change(model, opt)`` outside the step, three more: losses, state and the step."""
    model, opt = model_and_optimizer()
    step = step_function(model, opt)
    step = ndl.compile(step) if compiled else step
    losses = train(step, opt, 3)
    change(model, opt)
    losses += train(step, opt, 3, seed=2)
    return losses, state_arrays(model, opt), step


def _zero_first_weight(model, opt):
    weight = model.modules[0].weight
    weight.data = ndl.Tensor(np.zeros(weight.shape, np.float32))


def _halve_every_parameter(model, opt):  # a course-written update outside the compiled step
    for param in model.parameters():
        param.data = param.data * 0.5


def _swap_two_biases(model, opt):
    first, last = model.modules[1].weight, model.modules[1].bias  # BatchNorm1d(16): both of shape (16,)
    first.data, last.data = last.data, first.data


def _new_parameter(model, opt):
    linear = model.modules[0]
    linear.weight = nn.Parameter(ndl.Tensor(np.ones(linear.weight.shape, np.float32)))


CHANGES = {
    "a parameter given new values": (_zero_first_weight, 1),
    "every parameter updated the course's way": (_halve_every_parameter, 1),
    "two parameters' arrays swapped": (_swap_two_biases, 2),
    "a new Parameter object": (_new_parameter, 2),
}


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_state_replaced_between_calls_is_adopted_or_captured_and_always_eagers(name):
    """A parameter given new arrays of its shape between calls: the values are copied into the
    arrays the plan reads and the next call replays. Arrays that share memory with the state (a
    swap) or a new Parameter object (the optimizer still holds the old one) make it capture."""
    change, captures = CHANGES[name]
    eager_losses, eager_state, _ = run_with_change_between_calls(change, False)
    losses, state, step = run_with_change_between_calls(change, True)
    assert all(np.array_equal(a, b) for a, b in zip(eager_losses, losses))
    assert eager_state.keys() == state.keys()
    assert all(np.array_equal(eager_state[key], state[key]) for key in state)
    assert step.captures == captures


def test_a_compiled_forward_and_backward_with_the_update_written_outside():
    """The course loop with only the forward and backward compiled, and the update written out
    after the call: one capture, then replays, bitwise as eager."""
    runs = {}
    for compiled in (False, True):
        model, opt = model_and_optimizer()
        forward_backward = forward_backward_of(model)
        step = ndl.compile(forward_backward) if compiled else forward_backward

        def train_step(x, y):
            loss = step(x, y)
            course_update(model, 0.05)
            return loss

        losses = train(train_step, opt, 14)
        runs[compiled] = (losses, state_arrays(model, opt), step)
    (eager_losses, eager_state, _), (losses, state, step) = runs[False], runs[True]
    assert all(np.array_equal(a, b) for a, b in zip(eager_losses, losses))
    assert all(np.array_equal(eager_state[key], state[key]) for key in state)
    assert step.captures == 2 and step.replays == 12  # the full batches and the partial one
