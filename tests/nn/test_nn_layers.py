"""Layers against hand computations in numpy: outputs and gradients, plus the course's seeded draws."""
import math

import numpy as np
import pytest

import needle as ndl
from needle import nn


def tensor(array, device, requires_grad=True):
    return ndl.Tensor(np.asarray(array, dtype=np.float32), device=device, requires_grad=requires_grad)


def test_linear_draws_the_course_values_weight_then_bias():
    np.random.seed(0)
    layer = nn.Linear(7, 4)
    np.random.seed(0)
    bound_w = math.sqrt(2) * math.sqrt(3 / 7)
    weight = np.random.rand(7, 4) * 2 * bound_w - bound_w
    bound_b = math.sqrt(2) * math.sqrt(3 / 4)
    bias = (np.random.rand(4, 1) * 2 * bound_b - bound_b).reshape(1, 4)
    assert isinstance(layer.weight, nn.Parameter) and isinstance(layer.bias, nn.Parameter)
    assert layer.weight.dtype == np.float32 and layer.bias.shape == (1, 4)
    np.testing.assert_allclose(layer.weight.numpy(), weight, rtol=1e-6)
    np.testing.assert_allclose(layer.bias.numpy(), bias, rtol=1e-6)


@pytest.mark.parametrize("create_graph", [True, False])
def test_linear_forward_and_gradients(device, create_graph):
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((5, 3)).astype(np.float32)
    layer = nn.Linear(3, 2, device=device)
    w, b = layer.weight.numpy().copy(), layer.bias.numpy().copy()
    x = tensor(x_np, device)
    out = layer(x)
    np.testing.assert_allclose(out.numpy(), x_np @ w + b, rtol=1e-5, atol=1e-6)
    (out * out).sum().backward(create_graph=create_graph)
    g = 2 * (x_np @ w + b)
    np.testing.assert_allclose(layer.weight.grad.numpy(), x_np.T @ g, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(layer.bias.grad.numpy(), g.sum(0, keepdims=True), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), g @ w.T, rtol=1e-4, atol=1e-5)


def test_linear_without_bias_has_one_parameter(device):
    layer = nn.Linear(3, 2, bias=False, device=device)
    assert layer.bias is None and len(layer.parameters()) == 1
    x_np = np.ones((1, 3), dtype=np.float32)
    np.testing.assert_allclose(layer(tensor(x_np, device)).numpy(), x_np @ layer.weight.numpy(), rtol=1e-6)


def test_activations_and_gradients(device):
    x_np = np.array([[-2.0, -0.5, 0.5, 3.0]], dtype=np.float32)
    cases = [
        (nn.ReLU(), np.maximum(x_np, 0), (x_np > 0).astype(np.float32)),
        (nn.Tanh(), np.tanh(x_np), 1 - np.tanh(x_np) ** 2),
        (nn.Sigmoid(), 1 / (1 + np.exp(-x_np)), np.exp(-x_np) / (1 + np.exp(-x_np)) ** 2),
        (nn.Identity(), x_np, np.ones_like(x_np)),
    ]
    for module, expected, derivative in cases:
        x = tensor(x_np, device)
        out = module(x)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6, err_msg=type(module).__name__)
        out.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), derivative, rtol=1e-5, atol=1e-6, err_msg=type(module).__name__)


def test_sequential_chains_modules_and_its_gradient(device):
    np.random.seed(1)
    model = nn.Sequential(nn.Linear(4, 3, device=device), nn.ReLU(), nn.Linear(3, 2, device=device))
    w1, b1 = model.modules[0].weight.numpy(), model.modules[0].bias.numpy()
    w2, b2 = model.modules[2].weight.numpy(), model.modules[2].bias.numpy()
    x_np = np.random.randn(6, 4).astype(np.float32)
    hidden = np.maximum(x_np @ w1 + b1, 0)
    out = model(tensor(x_np, device, requires_grad=False))
    np.testing.assert_allclose(out.numpy(), hidden @ w2 + b2, rtol=1e-5, atol=1e-6)
    out.sum().backward(create_graph=False)
    np.testing.assert_allclose(model.modules[2].weight.grad.numpy(), hidden.T @ np.ones((6, 2)), rtol=1e-5, atol=1e-5)
    upstream = np.ones((6, 2)) @ w2.T * (hidden > 0)
    np.testing.assert_allclose(model.modules[0].weight.grad.numpy(), x_np.T @ upstream, rtol=1e-4, atol=1e-5)


def test_sequential_modules_is_the_course_tuple_and_the_method():
    first, second = nn.Linear(2, 2), nn.ReLU()
    model = nn.Sequential(first, second)
    assert model.modules == (first, second) and model.modules[1] is second and len(model) == 2
    assert model.modules() == [model, first, second]
    assert list(model) == [first, second]


def test_flatten_keeps_the_batch_dimension(device):
    x_np = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = tensor(x_np, device)
    out = nn.Flatten()(x)
    np.testing.assert_array_equal(out.numpy(), x_np.reshape(2, 12))
    (out * tensor(np.arange(24).reshape(2, 12), device, requires_grad=False)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.arange(24).reshape(2, 3, 4))


def test_residual_adds_the_input(device):
    x_np = np.array([[1.0, -2.0]], dtype=np.float32)
    x = tensor(x_np, device)
    out = nn.Residual(nn.ReLU())(x)
    np.testing.assert_array_equal(out.numpy(), np.maximum(x_np, 0) + x_np)
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[2.0, 1.0]])


def test_softmax_loss_value_and_gradient(device):
    rng = np.random.default_rng(2)
    logits_np = rng.standard_normal((5, 4)).astype(np.float32)
    labels_np = np.array([0, 3, 1, 1, 2])
    logits = tensor(logits_np, device)
    loss = nn.SoftmaxLoss()(logits, ndl.Tensor(labels_np, device=device, requires_grad=False))
    shifted = logits_np - logits_np.max(1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    expected = -log_probs[np.arange(5), labels_np].mean()
    assert loss.shape == () or loss.size == 1
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-5)
    loss.backward()
    grad = np.exp(log_probs)
    grad[np.arange(5), labels_np] -= 1
    np.testing.assert_allclose(logits.grad.numpy(), grad / 5, rtol=1e-5, atol=1e-6)


def test_softmax_loss_is_stable_for_huge_logits(device):
    logits = tensor([[1e5, 0.0, -1e5], [2e5, 2e5, 0.0]], device)
    loss = nn.SoftmaxLoss()(logits, ndl.Tensor([0, 1], device=device, dtype="int64", requires_grad=False))
    np.testing.assert_allclose(loss.numpy(), np.log(2) / 2, rtol=1e-5)
    loss.backward()
    grad = logits.grad.numpy()
    assert np.all(np.isfinite(grad))
    np.testing.assert_allclose(grad, [[0, 0, 0], [0.25, -0.25, 0]], atol=1e-6)


def test_dropout_statistics_in_training_and_identity_in_eval(device):
    np.random.seed(3)
    p = 0.3
    x_np = np.full((400, 500), 2.0, dtype=np.float32)
    drop = nn.Dropout(p)
    out = drop(tensor(x_np, device, requires_grad=False)).numpy()
    zeros = np.mean(out == 0)
    assert abs(zeros - p) < 0.01
    np.testing.assert_allclose(out[out != 0], 2.0 / (1 - p), rtol=1e-6)
    assert abs(out.mean() - 2.0) < 0.02
    drop.eval()
    x = tensor(x_np, device)
    assert drop(x) is x


def test_dropout_uses_the_course_mask_draw():
    np.random.seed(4)
    out = nn.Dropout(0.5)(ndl.Tensor(np.ones((3, 4), dtype=np.float32))).numpy()
    np.random.seed(4)
    mask = np.random.rand(3, 4) <= 0.5
    np.testing.assert_allclose(out, mask * 2.0)


def test_dropout_gradient_follows_the_mask():
    np.random.seed(5)
    x = ndl.Tensor(np.ones((4, 5), dtype=np.float32))
    out = nn.Dropout(0.25)(x)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), out.numpy())


def test_dropout_rejects_a_bad_probability():
    with pytest.raises(ValueError, match="p=1.5"):
        nn.Dropout(1.5)
