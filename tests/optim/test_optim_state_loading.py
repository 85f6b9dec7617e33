"""Optimizer state loading at its edges: SGD's ``buffer_momentum`` (missing, invalid, different
from the receiving optimizer's) and Adam at ``t=0`` and with bad betas or weight decay. Every
refused load names the value and changes nothing."""
import math

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim


def two_params():
    return [nn.Parameter(ndl.Tensor([1.0, 2.0])), nn.Parameter(ndl.Tensor([[3.0]]))]


def set_grads(params, value=1.0):
    for p in params:
        p.grad = ndl.Tensor(np.full(p.shape, value, np.float32))


def stepped_sgd(momentum=0.9, steps=2):
    params = two_params()
    opt = optim.SGD(params, lr=0.1, momentum=momentum)
    for step in range(steps):
        set_grads(params, 1.0 + step)
        opt.step()
    return params, opt


def sgd_snapshot(opt):
    return (
        (opt.lr, opt.momentum, opt.weight_decay, opt.u.momentum),
        {id(p): np.array(v) for p, v in opt.momentum_buffer.items()},
        [p.numpy().copy() for p in opt.params],
    )


def assert_sgd_unchanged(opt, before):
    after = sgd_snapshot(opt)
    assert after[0] == before[0]
    assert after[1].keys() == before[1].keys()
    for key in after[1]:
        np.testing.assert_array_equal(after[1][key], before[1][key])
    for now, then in zip(after[2], before[2]):
        np.testing.assert_array_equal(now, then)


def course_velocities(opt):
    return [np.array(opt.u[p]) for p in opt.params]


# ---- SGD's buffer_momentum -------------------------------------------------------------------------
def test_sgd_saves_the_momentum_its_buffers_are_scaled_by():
    _, opt = stepped_sgd(momentum=0.9)
    opt.momentum = 0.5  # changed by hand: the buffers are rescaled at the next step only
    state = opt.state_dict()
    assert state["buffer_momentum"] == 0.9 and state["hyperparameters"]["momentum"] == 0.5


def test_a_buffer_momentum_other_than_the_receivers_is_used_and_the_run_continues_exactly():
    params, opt = stepped_sgd(momentum=0.9)
    opt.momentum = 0.5
    state = opt.state_dict()
    receiver = optim.SGD(two_params(), lr=0.3, momentum=0.2)  # its own momentum differs from both
    receiver.load_state_dict(state)
    assert receiver.momentum == 0.5 and receiver.u.momentum == 0.9
    for got, want in zip(course_velocities(receiver), course_velocities(opt)):
        np.testing.assert_array_equal(got, want)
    for p, q in zip(receiver.params, params):
        p.data = ndl.Tensor(q.numpy().copy())  # the weights the state was saved with
    set_grads(params, 3.0)
    set_grads(receiver.params, 3.0)
    opt.step()
    receiver.step()
    for p, q in zip(receiver.params, params):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_a_state_without_buffer_momentum_is_read_as_scaled_by_its_own_momentum():
    """States saved before ``buffer_momentum`` existed: the buffers were scaled by ``momentum``."""
    _, opt = stepped_sgd(momentum=0.9)
    state = opt.state_dict()
    del state["buffer_momentum"]
    receiver = optim.SGD(two_params(), lr=0.1, momentum=0.3)
    receiver.load_state_dict(state)
    assert receiver.momentum == 0.9 and receiver.u.momentum == 0.9
    for got, want in zip(course_velocities(receiver), course_velocities(opt)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_state_without_buffers_or_buffer_momentum_loads():
    state = optim.SGD(two_params(), lr=0.1).state_dict()  # momentum 0: no buffers are kept
    del state["buffer_momentum"]
    receiver = optim.SGD(two_params(), lr=0.5, momentum=0.5)
    receiver.load_state_dict(state)
    assert receiver.momentum == 0.0 and receiver.u.momentum == 0.0 and len(receiver.momentum_buffer) == 0


@pytest.mark.parametrize("bad, words", [
    (1.0, "buffer_momentum must be < 1, got buffer_momentum=1.0"),
    (1.5, "buffer_momentum must be < 1, got buffer_momentum=1.5"),
    (-0.1, "buffer_momentum must be >= 0, got buffer_momentum=-0.1"),
    (math.nan, "buffer_momentum must be a finite number, got buffer_momentum=nan"),
    ("0.9", "buffer_momentum must be a number, got '0.9'"),
    (None, "buffer_momentum must be a number, got None"),
    (True, "buffer_momentum must be a number, got True"),
])
def test_an_invalid_buffer_momentum_is_refused_naming_it_and_changes_nothing(bad, words):
    _, opt = stepped_sgd(momentum=0.9)
    state = {**opt.state_dict(), "buffer_momentum": bad}
    state["hyperparameters"] = {**state["hyperparameters"], "lr": 0.7}
    receiver_params, receiver = stepped_sgd(momentum=0.5, steps=1)
    before = sgd_snapshot(receiver)
    with pytest.raises(ValueError) as caught:
        receiver.load_state_dict(state)
    message = str(caught.value)
    assert message.startswith("SGD.load_state_dict failed, nothing was loaded:\n  ")
    assert f"{words} (the momentum the momentum buffers are scaled by)" in message
    assert_sgd_unchanged(receiver, before)


def test_a_valid_buffer_momentum_at_the_edge_loads():
    _, opt = stepped_sgd(momentum=0.9)
    state = {**opt.state_dict(), "buffer_momentum": 0}
    receiver = optim.SGD(two_params(), lr=0.1, momentum=0.9)
    receiver.load_state_dict(state)
    assert receiver.u.momentum == 0.0 and isinstance(receiver.u.momentum, float)
    np.testing.assert_array_equal(course_velocities(receiver)[0], opt.momentum_buffer[opt.params[0]])


# ---- Adam: t=0, betas, weight decay ------------------------------------------------------------------
def test_a_fresh_adams_state_loads_at_t_zero():
    fresh = optim.Adam(two_params(), lr=0.2, beta1=0.8)
    state = fresh.state_dict()
    assert state["t"] == 0 and state["state"] == {}
    params = two_params()
    trained = optim.Adam(params, lr=0.1)
    set_grads(params)
    trained.step()
    trained.load_state_dict(state)
    assert trained.t == 0 and trained.m == {} and trained.v == {}
    assert trained.lr == 0.2 and trained.beta1 == 0.8
    set_grads(params)
    before = [p.numpy().copy() for p in params]
    trained.step()  # the first step again: t=1, bias correction of a first step
    assert trained.t == 1
    for p, was in zip(params, before):
        np.testing.assert_allclose(p.numpy(), was - 0.2, rtol=1e-5)  # Adam's first step moves by lr


def test_adams_step_count_loads_as_an_int():
    params = two_params()
    opt = optim.Adam(params, lr=0.1)
    set_grads(params)
    opt.step()
    state = {**opt.state_dict(), "t": np.int64(7)}
    receiver = optim.Adam(two_params())
    receiver.load_state_dict(state)
    assert receiver.t == 7 and type(receiver.t) is int


BAD_ADAM = [
    ("beta1", -0.1, "beta1 must be >= 0, got beta1=-0.1"),
    ("beta1", 1.0, "beta1 must be < 1, got beta1=1.0"),
    ("beta1", 1.5, "beta1 must be < 1, got beta1=1.5"),
    ("beta2", -1e-3, "beta2 must be >= 0, got beta2=-0.001"),
    ("beta2", 1, "beta2 must be < 1, got beta2=1.0"),
    ("weight_decay", -0.01, "weight_decay must be >= 0, got weight_decay=-0.01"),
    ("eps", -1e-8, "eps must be >= 0, got eps=-1e-08"),
    ("lr", -0.1, "lr must be >= 0, got lr=-0.1"),
]


@pytest.mark.parametrize("name, value, message", BAD_ADAM)
def test_adam_refuses_bad_hyperparameters_naming_the_value(name, value, message):
    with pytest.raises(ValueError) as caught:
        optim.Adam(two_params(), **{name: value})
    assert str(caught.value) == message


@pytest.mark.parametrize("name, value", [("beta1", 0.0), ("beta2", 0.0), ("weight_decay", 0.0), ("eps", 0.0),
                                         ("beta1", 0.999999), ("beta2", 0.999999)])
def test_adam_accepts_the_edges_of_its_ranges(name, value):
    assert getattr(optim.Adam(two_params(), **{name: value}), name) == value


@pytest.mark.parametrize("name, value, message", BAD_ADAM)
def test_adam_load_state_dict_refuses_bad_hyperparameters_naming_the_value_and_changes_nothing(name, value, message):
    params = two_params()
    opt = optim.Adam(params, lr=0.1)
    set_grads(params)
    opt.step()
    state = opt.state_dict()
    state["hyperparameters"] = {**state["hyperparameters"], name: value}
    state["t"] = 5
    before = ({n: getattr(opt, n) for n in opt.hyperparameter_names}, opt.t,
              [np.array(opt.m[p]) for p in params], [np.array(opt.v[p]) for p in params])
    with pytest.raises(ValueError) as caught:
        opt.load_state_dict(state)
    assert str(caught.value) == f"Adam.load_state_dict failed, nothing was loaded:\n  {message}"
    assert {n: getattr(opt, n) for n in opt.hyperparameter_names} == before[0] and opt.t == before[1] == 1
    for now, then in zip([opt.m[p] for p in params] + [opt.v[p] for p in params], before[2] + before[3]):
        np.testing.assert_array_equal(now, then)


@pytest.mark.parametrize("name, value, message", [
    ("momentum", -0.5, "momentum must be >= 0, got momentum=-0.5"),
    ("momentum", 1.0, "momentum must be < 1, got momentum=1.0"),
    ("weight_decay", -1.0, "weight_decay must be >= 0, got weight_decay=-1.0"),
    ("lr", -1.0, "lr must be >= 0, got lr=-1.0"),
])
def test_sgd_refuses_bad_hyperparameters_in_the_constructor_and_in_a_state(name, value, message):
    with pytest.raises(ValueError) as caught:
        optim.SGD(two_params(), **{name: value})
    assert str(caught.value) == message
    _, opt = stepped_sgd()
    state = opt.state_dict()
    state["hyperparameters"] = {**state["hyperparameters"], name: value}
    before = sgd_snapshot(opt)
    with pytest.raises(ValueError) as caught:
        opt.load_state_dict(state)
    assert str(caught.value) == f"SGD.load_state_dict failed, nothing was loaded:\n  {message}"
    assert_sgd_unchanged(opt, before)


# ---- SGD's velocities read as the course's u ----------------------------------------------------------
def test_sgd_velocities_behave_as_a_dict_of_the_courses_u():
    params, opt = stepped_sgd(momentum=0.75)
    assert len(opt.u) == 2 and list(opt.u) == params and params[0] in opt.u
    u = {p: np.array(opt.u[p]) for p in params}
    for p in params:
        np.testing.assert_allclose(opt.momentum_buffer[p] * 0.25, u[p], rtol=1e-6)
    del opt.u[params[1]]
    assert len(opt.u) == 1 and params[1] not in opt.momentum_buffer and list(opt.u) == [params[0]]
    assert dict(opt.u.items()).keys() == {params[0]}


def test_a_momentum_change_rescales_the_buffers_and_keeps_u():
    params, opt = stepped_sgd(momentum=0.9)
    u_before = [np.array(opt.u[p]) for p in params]
    opt.u.rescale(0.5)
    assert opt.u.momentum == 0.5
    for p, u in zip(params, u_before):
        np.testing.assert_allclose(np.array(opt.u[p]), u, rtol=1e-6)
        np.testing.assert_allclose(opt.momentum_buffer[p], u / 0.5, rtol=1e-6)


def test_momentum_zero_keeps_no_velocity_and_steps_by_the_gradient():
    params = two_params()
    opt = optim.SGD(params, lr=0.5, momentum=0.0, weight_decay=0.1)
    set_grads(params, 2.0)
    opt.step()
    assert len(opt.u) == 0 and opt.state_dict()["state"] == {}
    np.testing.assert_allclose(params[0].numpy(), np.array([1.0, 2.0]) - 0.5 * (2.0 + 0.1 * np.array([1.0, 2.0])), rtol=1e-6)


def test_a_step_at_momentum_zero_leaves_the_kept_velocities_bitwise_as_they_were():
    params, opt = stepped_sgd(momentum=0.9)
    kept = [np.array(opt.momentum_buffer[p]) for p in params]
    opt.momentum = 0.0
    set_grads(params, 1.0)
    opt.step()
    assert opt.state_dict()["buffer_momentum"] == 0.9
    for p, was in zip(params, kept):
        np.testing.assert_array_equal(opt.momentum_buffer[p], was)  # not rescaled: no pass, no rounding


def test_the_course_defaults():
    sgd = optim.SGD(two_params())
    assert (sgd.lr, sgd.momentum, sgd.weight_decay) == (0.01, 0.0, 0.0)
    adam = optim.Adam(two_params())
    assert (adam.lr, adam.beta1, adam.beta2, adam.eps, adam.weight_decay, adam.t) == (0.01, 0.9, 0.999, 1e-8, 0.0, 0)
