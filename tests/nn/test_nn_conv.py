"""nn.Conv and nn.BatchNorm2d against numpy references (always) and PyTorch (when installed);
the example models built on them (the MNIST CNN, ResNet9) learning."""

import numpy as np
import pytest

import needle as ndl
from needle import nn
from needle.data import DataLoader, mnist, parse_mnist
from gradcheck import central_differences, check_gradients
from example_scripts import load_example
from torch_oracle import optional_torch

rng = np.random.default_rng(21)


def conv_nchw_numpy(x, weight, bias, stride):
    """``nn.Conv``'s definition on NCHW arrays: same padding k // 2, a loop over output positions."""
    kernel = weight.shape[0]
    padding = kernel // 2
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    rows = (x.shape[2] - kernel) // stride + 1
    cols = (x.shape[3] - kernel) // stride + 1
    out = np.zeros((x.shape[0], weight.shape[3], rows, cols))
    for i in range(rows):
        for j in range(cols):
            window = x[:, :, i * stride : i * stride + kernel, j * stride : j * stride + kernel]
            out[:, :, i, j] = np.einsum("nchw,hwco->no", window, weight)
    return out if bias is None else out + bias[None, :, None, None]


def batchnorm2d_numpy(x, weight, bias, eps=1e-5):
    mean = x.mean(axis=(0, 2, 3))
    var = x.var(axis=(0, 2, 3))
    shape = (1, -1, 1, 1)
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * weight.reshape(shape) + bias.reshape(shape)


CONV_CASES = [(1, 1), (3, 1), (3, 2), (5, 1), (5, 2)]


@pytest.mark.parametrize("kernel, stride", CONV_CASES, ids=[f"k{k}-s{s}" for k, s in CONV_CASES])
def test_conv_module_forward_and_gradients_match_numpy(kernel, stride, device):
    layer = nn.Conv(2, 3, kernel, stride=stride, device=device, dtype="float64")
    x = rng.normal(size=(2, 2, 5, 6))
    weight, bias = layer.weight.numpy(), layer.bias.numpy()
    out = layer(ndl.Tensor(x, device=device, dtype="float64"))
    np.testing.assert_allclose(out.numpy(), conv_nchw_numpy(x, weight, bias, stride), rtol=1e-10, atol=1e-12)

    def through_layer(images, new_weight, new_bias):
        # NOTE: forward reads the attributes on every call, so replacing them (as the course's tests do) works.
        layer.weight, layer.bias = new_weight, new_bias
        return layer(images)

    check_gradients(through_layer, [x, weight, bias], device)


def test_conv_without_bias(device):
    layer = nn.Conv(3, 2, 3, bias=False, device=device)
    assert layer.bias is None and len(layer.parameters()) == 1
    x = rng.normal(size=(1, 3, 4, 4)).astype(np.float32)
    out = layer(ndl.Tensor(x, device=device))
    np.testing.assert_allclose(out.numpy(), conv_nchw_numpy(x, layer.weight.numpy(), None, 1), rtol=1e-4, atol=1e-5)


def test_conv_draws_weight_then_bias_as_the_course(device):
    in_channels, out_channels, kernel = 3, 4, 3
    np.random.seed(3)
    layer = nn.Conv(in_channels, out_channels, kernel, device=device)
    np.random.seed(3)
    fan_in = kernel * kernel * in_channels
    weight_bound, bias_bound = np.sqrt(2) * np.sqrt(3 / fan_in), 1 / np.sqrt(fan_in)
    expected_weight = np.random.rand(kernel, kernel, in_channels, out_channels) * 2 * weight_bound - weight_bound
    expected_bias = np.random.rand(out_channels) * 2 * bias_bound - bias_bound
    assert layer.weight.dtype == np.float32 and layer.weight.device is device
    np.testing.assert_allclose(layer.weight.numpy(), expected_weight, rtol=1e-6)
    np.testing.assert_allclose(layer.bias.numpy(), expected_bias, rtol=1e-6)
    assert list(layer.state_dict()) == ["weight", "bias"]


def test_conv_rejects_input_that_is_not_nchw(device):
    layer = nn.Conv(3, 4, 3, device=device)
    with pytest.raises(ValueError, match=r"Conv\(3, 4, 3\) needs NCHW input of shape \(batch, 3, height, width\), got \(2, 8, 8, 3\)"):
        layer(ndl.Tensor(np.zeros((2, 8, 8, 3)), device=device))


def test_batchnorm2d_training_forward_gradients_and_running_statistics(device):
    bn = nn.BatchNorm2d(3, momentum=0.2, device=device, dtype="float64")
    weight, bias = np.array([1.0, 2.0, -0.5]), np.array([0.1, 0.0, 3.0])
    bn.weight.data = ndl.Tensor(weight, device=device, dtype="float64")
    bn.bias.data = ndl.Tensor(bias, device=device, dtype="float64")
    x = rng.normal(size=(2, 3, 3, 2)) * 2 + 1
    out = bn(ndl.Tensor(x, device=device, dtype="float64"))
    np.testing.assert_allclose(out.numpy(), batchnorm2d_numpy(x, weight, bias), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.2 * x.mean(axis=(0, 2, 3)), rtol=1e-10)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.8 + 0.2 * x.var(axis=(0, 2, 3)), rtol=1e-10)

    def through_layer(images, new_weight, new_bias):
        bn.weight, bn.bias = new_weight, new_bias
        return bn(images)

    check_gradients(through_layer, [x, weight, bias], device)


def test_batchnorm2d_eval_uses_running_statistics(device):
    bn = nn.BatchNorm2d(2, device=device, dtype="float64")
    for _ in range(3):
        bn(ndl.Tensor(rng.normal(size=(4, 2, 3, 3)) * 3 + 2, device=device, dtype="float64"))
    mean, var = bn.running_mean.numpy(), bn.running_var.numpy()
    bn.eval()
    x = rng.normal(size=(1, 2, 2, 2))
    expected = (x - mean.reshape(1, 2, 1, 1)) / np.sqrt(var.reshape(1, 2, 1, 1) + 1e-5)
    np.testing.assert_allclose(bn(ndl.Tensor(x, device=device, dtype="float64")).numpy(), expected, rtol=1e-10)
    np.testing.assert_allclose(bn.running_mean.numpy(), mean, err_msg="evaluation must not move the running mean")


def test_batchnorm2d_rejects_wrong_channels(device):
    with pytest.raises(ValueError, match=r"BatchNorm2d\(3\) needs NCHW input of shape \(batch, 3, height, width\)"):
        nn.BatchNorm2d(3, device=device)(ndl.Tensor(np.zeros((2, 4, 4, 3)), device=device))


# ---- numpy (always) and PyTorch (where installed) as oracles ------------------------------------
@pytest.mark.parametrize("kernel, stride", CONV_CASES, ids=[f"k{k}-s{s}" for k, s in CONV_CASES])
def test_conv_matches_numpy_and_torch_conv2d(kernel, stride, device):
    layer = nn.Conv(3, 4, kernel, stride=stride, device=device, dtype="float64")
    weight, bias = layer.weight.numpy().copy(), layer.bias.numpy().copy()
    x = rng.normal(size=(2, 3, 7, 6))
    ours_x = ndl.Tensor(x, device=device, dtype="float64")
    ours = layer(ours_x)
    upstream = rng.normal(size=ours.shape)
    (ours * ndl.Tensor(upstream, device=device, dtype="float64")).sum().backward()
    grads = [ours_x.grad.numpy(), layer.weight.grad.numpy(), layer.bias.grad.numpy()]

    np.testing.assert_allclose(ours.numpy(), conv_nchw_numpy(x, weight, bias, stride), rtol=1e-10, atol=1e-12)
    loss = lambda *arrays: float((conv_nchw_numpy(*arrays, stride) * upstream).sum())  # noqa: E731
    for name, got, want in zip(("x", "weight", "bias"), grads, central_differences(loss, [x, weight, bias])):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8, err_msg=f"gradient of {name}")

    torch = optional_torch()
    if torch is None:
        return
    reference = torch.nn.Conv2d(3, 4, kernel, stride=stride, padding=kernel // 2, dtype=torch.float64)
    reference.weight.data = torch.tensor(weight.transpose(3, 2, 0, 1))
    reference.bias.data = torch.tensor(bias)
    theirs_x = torch.tensor(x, requires_grad=True)
    theirs = reference(theirs_x)
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-10, atol=1e-12)
    (theirs * torch.tensor(upstream)).sum().backward()
    np.testing.assert_allclose(grads[0], theirs_x.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grads[1], reference.weight.grad.numpy().transpose(2, 3, 1, 0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grads[2], reference.bias.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_batchnorm2d_matches_numpy_and_torch_in_training(device):
    bn = nn.BatchNorm2d(3, device=device, dtype="float64")
    weight, bias = bn.weight.numpy().copy(), bn.bias.numpy().copy()
    x = rng.normal(size=(4, 3, 5, 5)) * 2 + 1
    ours_x = ndl.Tensor(x, device=device, dtype="float64")
    ours = bn(ours_x)
    upstream = rng.normal(size=x.shape)
    (ours * ndl.Tensor(upstream, device=device, dtype="float64")).sum().backward()
    grads = [ours_x.grad.numpy(), bn.weight.grad.numpy(), bn.bias.grad.numpy()]

    np.testing.assert_allclose(ours.numpy(), batchnorm2d_numpy(x, weight, bias), rtol=1e-10, atol=1e-12)
    loss = lambda *arrays: float((batchnorm2d_numpy(*arrays) * upstream).sum())  # noqa: E731
    for name, got, want in zip(("x", "weight", "bias"), grads, central_differences(loss, [x, weight, bias])):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=f"gradient of {name}")
    # the course's running statistics: momentum 0.1 from zeros and ones, the biased batch variance
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * x.mean(axis=(0, 2, 3)), rtol=1e-10)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * x.var(axis=(0, 2, 3)), rtol=1e-10)

    torch = optional_torch()
    if torch is None:
        return
    reference = torch.nn.BatchNorm2d(3, dtype=torch.float64)
    theirs_x = torch.tensor(x, requires_grad=True)
    theirs = reference(theirs_x)
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-8, atol=1e-10)
    (theirs * torch.tensor(upstream)).sum().backward()
    np.testing.assert_allclose(grads[0], theirs_x.grad.numpy(), rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(grads[1], reference.weight.grad.numpy(), rtol=1e-8)
    np.testing.assert_allclose(grads[2], reference.bias.grad.numpy(), rtol=1e-8)
    # NOTE: the running mean agrees; the running variance does not, by design: the course (and
    # BatchNorm1d here) blends in the biased batch variance, PyTorch the unbiased one.
    np.testing.assert_allclose(bn.running_mean.numpy(), reference.running_mean.numpy(), rtol=1e-10)


# ---- the examples built on them ---------------------------------------------------------------------
def test_mnist_cnn_learns_a_small_subset_in_one_epoch():
    np.random.seed(0)
    files = mnist()
    train_images, train_labels = parse_mnist(files.train_images, files.train_labels)
    test_images, test_labels = parse_mnist(files.test_images, files.test_labels)
    model = load_example("mnist_models").cnn()
    loader = DataLoader(ndl.data.NDArrayDataset(train_images[:2000], train_labels[:2000]), 50, shuffle=True)
    optimizer = ndl.optim.Adam(model.parameters(), lr=2e-3)
    loss_fn = nn.SoftmaxLoss()
    for images, labels in loader:
        optimizer.reset_grad()
        loss_fn(model(images), labels).backward(create_graph=False)
        optimizer.step()
    model.eval()
    with ndl.no_grad():
        logits = model(ndl.Tensor(test_images[:1000], requires_grad=False))
    accuracy = float((logits.numpy().argmax(axis=1) == test_labels[:1000]).mean())
    assert accuracy > 0.85, f"test accuracy {accuracy:.3f} after one epoch on 2,000 images (0.89 when written)"


def test_resnet9_trains_and_evaluates_with_the_course_helpers():
    np.random.seed(0)
    models, simple_ml = load_example("models"), load_example("simple_ml")
    model = models.ResNet9()
    images = np.random.rand(16, 3, 32, 32).astype(np.float32)
    labels = np.arange(16, dtype=np.uint8) % 10
    loader = DataLoader(ndl.data.NDArrayDataset(images, labels), 8)
    first_accuracy, first_loss = simple_ml.train_cifar10(model, loader, n_epochs=1, lr=3e-3)
    accuracy, loss = simple_ml.train_cifar10(model, loader, n_epochs=6, lr=3e-3)
    assert loss < first_loss, "training on the same 16 images lowers the loss"
    assert model.training
    eval_accuracy, eval_loss = simple_ml.evaluate_cifar10(model, loader)
    assert not model.training and 0.0 <= eval_accuracy <= 1.0 and eval_loss > 0
    assert model(ndl.Tensor(images[:2])).shape == (2, 10)


def test_train_mnist_example_takes_the_cnn(capsys):
    example = load_example("train_mnist")
    test = example.main(["--model", "cnn", "--train-samples", "256", "--epochs", "1", "--no-progress"])
    assert "MNIST CNN" in capsys.readouterr().out
    assert 0.0 <= test["accuracy"] <= 1.0
    with pytest.raises(SystemExit):
        example.parse_arguments(["--model", "transformer"])
