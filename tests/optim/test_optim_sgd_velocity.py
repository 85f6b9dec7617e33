"""SGD keeps its velocities scaled internally; what users see (u, parameters) is the course's rule."""
import numpy as np

import needle as ndl


def _reference(weight, grads, lr, momenta):
    u = np.zeros_like(weight)
    for grad, momentum in zip(grads, momenta):
        u = momentum * u + (1 - momentum) * grad
        weight = weight - lr * u
    return weight, u


def test_u_and_parameters_follow_the_course_rule_when_momentum_changes_mid_run():
    rng = np.random.default_rng(0)
    start = rng.standard_normal((4, 3)).astype(np.float32)
    grads = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(5)]
    momenta = [0.9, 0.9, 0.5, 0.5, 0.99]
    param = ndl.nn.Parameter(ndl.Tensor(start))
    optimizer = ndl.optim.SGD([param], lr=0.1, momentum=momenta[0])
    for grad, momentum in zip(grads, momenta):
        optimizer.momentum = momentum
        param.grad = ndl.Tensor(grad)
        optimizer.step()
    expected_weight, expected_u = _reference(start.astype(np.float64), grads, 0.1, momenta)
    np.testing.assert_allclose(param.numpy(), expected_weight, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(optimizer.u[param]), expected_u, rtol=1e-5, atol=1e-6)
    assert param.dtype == np.float32


def test_setting_u_by_hand_is_read_back_unchanged_and_used_by_the_next_step():
    param = ndl.nn.Parameter(ndl.Tensor(np.zeros(3, dtype=np.float32)))
    optimizer = ndl.optim.SGD([param], lr=1.0, momentum=0.5)
    optimizer.u[param] = np.array([2.0, 0.0, -2.0], dtype=np.float32)
    np.testing.assert_allclose(optimizer.u[param], [2.0, 0.0, -2.0])
    param.grad = ndl.Tensor(np.zeros(3, dtype=np.float32))
    optimizer.step()
    # u = 0.5 * u + 0.5 * 0 = [1, 0, -1]; w = 0 - 1.0 * u
    np.testing.assert_allclose(param.numpy(), [-1.0, 0.0, 1.0])
