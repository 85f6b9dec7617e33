"""SGD and Adam against an independent numpy reimplementation, and what a step must not touch."""
import gc

import numpy as np
import pytest

import needle as ndl
from needle import nn, optim


def make_params(device, shapes=((3, 4), (1, 4), (5,))):
    rng = np.random.default_rng(0)
    return [nn.Parameter(ndl.Tensor(rng.standard_normal(s).astype(np.float32), device=device)) for s in shapes]


def gradient_sequence(params, steps):
    rng = np.random.default_rng(1)
    return [[rng.standard_normal(p.shape).astype(np.float32) for p in params] for _ in range(steps)]


def set_grads(params, grads, device):
    for p, g in zip(params, grads):
        p.grad = ndl.Tensor(g, device=device, requires_grad=False)


def sgd_numpy(weights, grads_per_step, lr, momentum, weight_decay):
    weights = [w.astype(np.float64) for w in weights]
    velocity = [np.zeros_like(w) for w in weights]
    for grads in grads_per_step:
        for i, g in enumerate(grads):
            grad = g + weight_decay * weights[i]
            velocity[i] = momentum * velocity[i] + (1 - momentum) * grad
            weights[i] = weights[i] - lr * velocity[i]
    return weights, velocity


def adam_numpy(weights, grads_per_step, lr, beta1, beta2, eps, weight_decay):
    weights = [w.astype(np.float64) for w in weights]
    m = [np.zeros_like(w) for w in weights]
    v = [np.zeros_like(w) for w in weights]
    for t, grads in enumerate(grads_per_step, start=1):
        for i, g in enumerate(grads):
            grad = g + weight_decay * weights[i]
            m[i] = beta1 * m[i] + (1 - beta1) * grad
            v[i] = beta2 * v[i] + (1 - beta2) * grad**2
            m_hat = m[i] / (1 - beta1**t)
            v_hat = v[i] / (1 - beta2**t)
            weights[i] = weights[i] - lr * m_hat / (v_hat**0.5 + eps)
    return weights, m, v


@pytest.mark.parametrize("momentum,weight_decay", [(0.0, 0.0), (0.9, 0.0), (0.0, 0.1), (0.5, 0.01)])
def test_sgd_matches_numpy(device, momentum, weight_decay):
    params = make_params(device)
    start = [p.numpy().copy() for p in params]
    grads = gradient_sequence(params, 5)
    opt = optim.SGD(params, lr=0.1, momentum=momentum, weight_decay=weight_decay)
    for step_grads in grads:
        set_grads(params, step_grads, device)
        opt.step()
    expected, velocity = sgd_numpy(start, grads, 0.1, momentum, weight_decay)
    for p, w in zip(params, expected):
        assert p.dtype == np.float32
        np.testing.assert_allclose(p.numpy(), w, rtol=1e-5, atol=1e-6)
    if momentum:
        for p, u in zip(params, velocity):
            assert opt.u[p].dtype == np.float32
            np.testing.assert_allclose(np.asarray(ndl.NDArray(opt.u[p]).numpy()), u, rtol=1e-5, atol=1e-6)


def test_sgd_first_momentum_step_uses_one_minus_momentum():
    w = nn.Parameter(ndl.Tensor([1.0]))
    w.grad = ndl.Tensor([2.0])
    optim.SGD([w], lr=1.0, momentum=0.75).step()
    np.testing.assert_allclose(w.numpy(), [1.0 - 0.25 * 2.0])


@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
def test_adam_matches_numpy(device, weight_decay):
    params = make_params(device)
    start = [p.numpy().copy() for p in params]
    grads = gradient_sequence(params, 6)
    opt = optim.Adam(params, lr=0.01, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=weight_decay)
    for step_grads in grads:
        set_grads(params, step_grads, device)
        opt.step()
    expected, m, v = adam_numpy(start, grads, 0.01, 0.8, 0.99, 1e-6, weight_decay)
    assert opt.t == 6
    for i, p in enumerate(params):
        assert p.dtype == np.float32 and opt.m[p].dtype == np.float32 and opt.v[p].dtype == np.float32
        np.testing.assert_allclose(p.numpy(), expected[i], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ndl.NDArray(opt.m[p]).numpy(), m[i], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ndl.NDArray(opt.v[p]).numpy(), v[i], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("make", [
    lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1),
    lambda ps: optim.SGD(ps, lr=0.1),
    lambda ps: optim.Adam(ps, lr=0.1, weight_decay=0.1),
], ids=["sgd-momentum", "sgd", "adam"])
def test_a_step_builds_no_graph_and_leaves_grads_alone(make, graph_baseline):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    x = ndl.Tensor(np.random.randn(5, 4), requires_grad=False)
    y = ndl.Tensor(np.array([0, 1, 1, 0, 1]), requires_grad=False)
    opt = make(model.parameters())
    nn.SoftmaxLoss()(model(x), y).backward(create_graph=False)
    grads = [p.grad for p in model.parameters()]
    grad_values = [g.numpy().copy() for g in grads]
    before = graph_baseline()
    for _ in range(3):
        opt.step()
    after = graph_baseline()
    assert after.live_nodes == before.live_nodes
    for p, g, value in zip(model.parameters(), grads, grad_values):
        assert p.grad is g
        np.testing.assert_array_equal(g.numpy(), value)
        assert p.dtype == np.float32 and p.op is None and p.requires_grad


def test_parameters_without_grad_are_skipped_and_reset_grad_clears():
    a, b = make_params(ndl.cpu(), shapes=((2,), (2,)))
    b_before = b.numpy().copy()
    a.grad = ndl.Tensor([1.0, 1.0])
    for opt in (optim.SGD([a, b], lr=0.1, momentum=0.5), optim.Adam([a, b], lr=0.1)):
        opt.step()
        np.testing.assert_array_equal(b.numpy(), b_before)
    assert b not in opt.m
    opt.zero_grad()
    assert a.grad is None and b.grad is None


def test_updates_are_in_place_on_the_parameter_array():
    w = nn.Parameter(ndl.Tensor([1.0, 2.0]))
    raw = w.cached_data.raw
    w.grad = ndl.Tensor([1.0, 1.0])
    optim.SGD([w], lr=0.5, momentum=0.9).step()
    assert w.cached_data.raw is raw
    np.testing.assert_allclose(raw, [0.95, 1.95])


def test_shared_parameters_are_stepped_once():
    w = nn.Parameter(ndl.Tensor([1.0]))
    w.grad = ndl.Tensor([1.0])
    optim.SGD([w, w], lr=1.0).step()
    np.testing.assert_allclose(w.numpy(), [0.0])


@pytest.mark.needle_backend("nd")  # asserts the float32 default
def test_numpy_scalar_hyperparameters_keep_float32():
    w = nn.Parameter(ndl.Tensor([1.0, 2.0]))
    w.grad = ndl.Tensor([1.0, 1.0])
    opt = optim.Adam([w], lr=np.float64(0.1), beta1=np.float64(0.9))
    opt.lr = np.float64(0.2)  # as a learning-rate schedule might set it
    opt.step()
    assert w.dtype == np.float32 and opt.m[w].dtype == np.float32 and opt.v[w].dtype == np.float32


@pytest.mark.parametrize("make,name", [
    (lambda ps: optim.SGD(ps, lr=-0.1), "lr=-0.1"),
    (lambda ps: optim.SGD(ps, momentum=1.0), "momentum=1.0"),
    (lambda ps: optim.SGD(ps, momentum=-0.5), "momentum=-0.5"),
    (lambda ps: optim.SGD(ps, weight_decay=-1), "weight_decay=-1"),
    (lambda ps: optim.Adam(ps, beta1=1.0), "beta1=1.0"),
    (lambda ps: optim.Adam(ps, beta2=1.5), "beta2=1.5"),
    (lambda ps: optim.Adam(ps, eps=-1e-8), "eps=-1e-08"),
    (lambda ps: optim.Adam(ps, lr=float("nan")), "lr=nan"),
    (lambda ps: optim.Adam(ps, lr="fast"), "lr must be a number, got 'fast'"),
])
def test_bad_hyperparameters_raise_value_error_naming_the_value(make, name):
    with pytest.raises(ValueError, match=name.replace("(", r"\(")):
        make(make_params(ndl.cpu()))


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_state_dict_restores_the_trajectory_exactly(kind):
    def build(params):
        if kind == "sgd":
            return optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01)
        return optim.Adam(params, lr=0.05, weight_decay=0.01)

    params = make_params(ndl.cpu())
    grads = gradient_sequence(params, 6)
    opt = build(params)
    for step_grads in grads[:3]:
        set_grads(params, step_grads, ndl.cpu())
        opt.step()
    checkpoint = opt.state_dict()
    weights = [p.numpy().copy() for p in params]
    for step_grads in grads[3:]:
        set_grads(params, step_grads, ndl.cpu())
        opt.step()
    final = [p.numpy().copy() for p in params]

    restored_params = [nn.Parameter(ndl.Tensor(w)) for w in weights]
    restored = build(restored_params)
    restored.lr = 123.0  # overwritten by the checkpoint's hyperparameters
    restored.load_state_dict(checkpoint)
    assert restored.lr == opt.lr
    for step_grads in grads[3:]:
        set_grads(restored_params, step_grads, ndl.cpu())
        restored.step()
    for a, b in zip(final, restored_params):
        np.testing.assert_array_equal(a, b.numpy())


def test_optimizer_load_state_dict_errors_change_nothing():
    params = make_params(ndl.cpu())
    opt = optim.Adam(params, lr=0.1)
    set_grads(params, gradient_sequence(params, 1)[0], ndl.cpu())
    opt.step()
    good = opt.state_dict()
    m_before = opt.m[params[0]].copy()

    bad_shape = {**good, "state": {**good["state"], 0: {"m": np.zeros((2, 2)), "v": np.zeros((3, 4))}}}
    with pytest.raises(ValueError, match=r"parameter 0: state 'm' has shape \(2, 2\), the parameter has \(3, 4\)"):
        opt.load_state_dict(bad_shape)
    bad_hyper = {**good, "hyperparameters": {**good["hyperparameters"], "beta2": 2.0}, "t": 99}
    with pytest.raises(ValueError, match="beta2=2.0"):
        opt.load_state_dict(bad_hyper)
    with pytest.raises(ValueError, match="state for parameter 7"):
        opt.load_state_dict({**good, "state": {7: {"m": np.zeros(1)}}})
    assert opt.t == 1 and opt.beta2 == 0.999
    np.testing.assert_array_equal(opt.m[params[0]], m_before)


def test_a_training_loop_lowers_the_loss():
    np.random.seed(0)
    x = ndl.Tensor(np.random.randn(64, 6), requires_grad=False)
    labels = (np.random.randn(64, 6) @ np.random.randn(6, 3)).argmax(1)
    y = ndl.Tensor(labels, requires_grad=False)
    for make in (lambda ps: optim.SGD(ps, lr=0.5, momentum=0.9), lambda ps: optim.Adam(ps, lr=0.02)):
        model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
        opt = make(model.parameters())
        losses = []
        for _ in range(60):
            opt.reset_grad()
            loss = nn.SoftmaxLoss()(model(x), y)
            loss.backward(create_graph=False)
            opt.step()
            losses.append(loss.item())
        gc.collect()
        assert losses[-1] < 0.5 * losses[0]
