"""BatchNorm1d and LayerNorm1d against numpy, and BatchNorm's running statistics outside the graph."""
import gc

import numpy as np
import pytest

import needle as ndl
from needle import nn


def batchnorm_numpy(x, weight, bias, eps):
    mean = x.mean(0)
    var = ((x - mean) ** 2).mean(0)
    return (x - mean) / np.sqrt(var + eps) * weight + bias, mean, var


@pytest.mark.parametrize("create_graph", [True, False])
def test_batchnorm_training_forward_and_gradients(device, create_graph):
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((6, 3)).astype(np.float64) * 3 + 1
    bn = nn.BatchNorm1d(3, device=device, dtype="float64")
    bn.weight.data = ndl.Tensor(np.array([1.0, 2.0, -0.5]), device=device, dtype="float64")
    bn.bias.data = ndl.Tensor(np.array([0.1, 0.0, 3.0]), device=device, dtype="float64")
    x = ndl.Tensor(x_np, device=device, dtype="float64")
    out = bn(x)
    expected, mean, var = batchnorm_numpy(x_np, bn.weight.numpy(), bn.bias.numpy(), 1e-5)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-10)
    upstream = rng.standard_normal((6, 3))
    (out * ndl.Tensor(upstream, device=device, dtype="float64", requires_grad=False)).sum().backward(
        create_graph=create_graph
    )
    normalized = (x_np - mean) / np.sqrt(var + 1e-5)
    np.testing.assert_allclose(bn.weight.grad.numpy(), (upstream * normalized).sum(0), rtol=1e-8)
    np.testing.assert_allclose(bn.bias.grad.numpy(), upstream.sum(0), rtol=1e-8)
    # d/dx by central differences of sum(upstream * batchnorm(x))
    numeric = np.zeros_like(x_np)
    for index in np.ndindex(*x_np.shape):
        shifted = []
        for delta in (1e-6, -1e-6):
            probe = x_np.copy()
            probe[index] += delta
            shifted.append((upstream * batchnorm_numpy(probe, bn.weight.numpy(), bn.bias.numpy(), 1e-5)[0]).sum())
        numeric[index] = (shifted[0] - shifted[1]) / 2e-6
    np.testing.assert_allclose(x.grad.numpy(), numeric, rtol=1e-5, atol=1e-6)


def test_batchnorm_running_statistics_and_eval(device):
    rng = np.random.default_rng(1)
    bn = nn.BatchNorm1d(4, momentum=0.2, device=device)
    assert bn.weight.shape == (4,) and bn.bias.shape == (4,)
    assert not isinstance(bn.running_mean, nn.Parameter) and not bn.running_mean.requires_grad
    assert len(bn.parameters()) == 2
    running_mean, running_var = np.zeros(4), np.ones(4)
    for _ in range(5):
        x_np = (rng.standard_normal((8, 4)) * [1, 2, 3, 4] + [0, 1, -1, 5]).astype(np.float32)
        bn(ndl.Tensor(x_np, device=device))
        running_mean = 0.8 * running_mean + 0.2 * x_np.mean(0)
        running_var = 0.8 * running_var + 0.2 * x_np.var(0)  # the biased batch variance, as the course
    np.testing.assert_allclose(bn.running_mean.numpy(), running_mean, rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), running_var, rtol=1e-5)
    assert bn.running_mean.dtype == np.float32 and bn.running_var.dtype == np.float32

    bn.eval()
    x_np = rng.standard_normal((3, 4)).astype(np.float32)
    out = bn(ndl.Tensor(x_np, device=device)).numpy()
    np.testing.assert_allclose(out, (x_np - running_mean) / np.sqrt(running_var + 1e-5), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bn.running_mean.numpy(), running_mean, rtol=1e-5)  # eval leaves them


def test_batchnorm_rejects_the_wrong_feature_count():
    with pytest.raises(ValueError, match=r"BatchNorm1d\(3\) needs input of shape \(batch, 3\), got \(2, 4\)"):
        nn.BatchNorm1d(3)(ndl.Tensor(np.ones((2, 4))))


def test_thousand_batchnorm_training_steps_leave_the_graph_size_unchanged():
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 3))
    opt = ndl.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.SoftmaxLoss()
    x = ndl.Tensor(np.random.randn(16, 5), requires_grad=False)
    y = ndl.Tensor(np.random.randint(0, 3, 16), requires_grad=False)

    def train_step(create_graph):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward(create_graph=create_graph)
        opt.step()

    for create_graph in (False, True):
        train_step(create_graph)
        gc.collect()
        after_one = ndl.autograd.snapshot()
        for _ in range(999):
            train_step(create_graph)
        gc.collect()
        after_many = ndl.autograd.snapshot()
        assert after_many.live_nodes == after_one.live_nodes, create_graph
        assert after_many.live_tensors == after_one.live_tensors, create_graph
    assert model.modules[1].running_mean.op is None and model.modules[1].running_mean.inputs == ()


def test_layernorm_forward_and_gradients(device):
    rng = np.random.default_rng(2)
    x_np = rng.standard_normal((4, 5)) * 2 + 3
    ln = nn.LayerNorm1d(5, device=device, dtype="float64")
    assert ln.weight.shape == (5,) and ln.bias.shape == (5,) and len(ln.parameters()) == 2
    ln.weight.data = ndl.Tensor(np.linspace(0.5, 1.5, 5), device=device, dtype="float64")
    x = ndl.Tensor(x_np, device=device, dtype="float64")
    out = ln(x)

    def layernorm(a):
        mean = a.mean(1, keepdims=True)
        var = ((a - mean) ** 2).mean(1, keepdims=True)
        return (a - mean) / np.sqrt(var + 1e-5) * np.linspace(0.5, 1.5, 5)

    np.testing.assert_allclose(out.numpy(), layernorm(x_np), rtol=1e-10)
    out.sum().backward()
    numeric = np.zeros_like(x_np)
    for index in np.ndindex(*x_np.shape):
        plus, minus = x_np.copy(), x_np.copy()
        plus[index] += 1e-6
        minus[index] -= 1e-6
        numeric[index] = (layernorm(plus).sum() - layernorm(minus).sum()) / 2e-6
    np.testing.assert_allclose(x.grad.numpy(), numeric, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ln.bias.grad.numpy(), np.full(5, 4.0))
