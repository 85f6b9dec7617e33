"""PyTorch habits on modules: ``to("cpu")``, ``zero_grad()``, and a repr that prints the module tree."""
import numpy as np
import pytest

import needle as ndl
from needle import nn


class Net(nn.Module):
    """A model holding submodules in a plain attribute, a list and a dict, as course code does."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Flatten(),
            nn.Linear(784, 256),
            nn.ReLU(),
            nn.Residual(nn.Sequential(nn.Linear(256, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Dropout(0.1))),
        )
        self.norms = [nn.LayerNorm1d(256)]
        self.heads = {"digits": nn.Linear(256, 10, bias=False)}
        self.loss = nn.SoftmaxLoss()


EXPECTED_REPR = """Net(
  (body): Sequential(
    (0): Flatten()
    (1): Linear(in_features=784, out_features=256, bias=True)
    (2): ReLU()
    (3): Residual(
      (fn): Sequential(
        (0): Linear(in_features=256, out_features=256, bias=True)
        (1): BatchNorm1d(256, eps=1e-05, momentum=0.1)
        (2): ReLU()
        (3): Dropout(p=0.1)
      )
    )
  )
  (norms.0): LayerNorm1d(256, eps=1e-05)
  (heads.digits): Linear(in_features=256, out_features=10, bias=False)
  (loss): SoftmaxLoss()
)"""


def test_repr_of_a_nested_model_is_a_pytorch_style_tree():
    assert repr(Net()) == EXPECTED_REPR


def test_repr_of_a_leaf_module_and_a_custom_extra_repr():
    class Scale(nn.Module):
        def __init__(self, factor):
            super().__init__()
            self.factor = factor

        def extra_repr(self):
            return f"factor={self.factor}"

    assert repr(nn.ReLU()) == "ReLU()"
    assert repr(nn.Sequential(Scale(2))) == "Sequential(\n  (0): Scale(factor=2)\n)"


def test_repr_of_a_module_cycle_stops_at_the_repeated_module():
    parent = nn.Sequential(nn.ReLU())
    child = nn.Identity()
    child.owner = parent  # a back-reference, as some course code keeps
    parent.modules = (child,)
    assert repr(parent) == "Sequential(\n  (0): Identity(\n    (owner): Sequential(...)\n  )\n)"


def test_named_children_lists_direct_submodules_once():
    model = Net()
    names = [name for name, _ in model.named_children()]
    assert names == ["body", "norms.0", "heads.digits", "loss"]
    shared = nn.Linear(2, 2)
    assert [name for name, _ in nn.Sequential(shared, shared).named_children()] == ["0"]


def _trained_layer():
    layer = nn.Linear(3, 2)
    layer(ndl.Tensor(np.ones((4, 3)))).sum().backward()
    return layer


def test_zero_grad_sets_gradients_to_none():
    layer = _trained_layer()
    assert layer.weight.grad is not None
    layer.zero_grad()
    assert layer.weight.grad is None and layer.bias.grad is None


def test_zero_grad_can_keep_zeroed_arrays():
    layer = _trained_layer()
    layer.zero_grad(set_to_none=False)
    assert layer.weight.grad.shape == (3, 2) and not layer.weight.grad.numpy().any()
    fresh = nn.Linear(3, 2)
    fresh.zero_grad(set_to_none=False)
    assert fresh.weight.grad is None


def test_model_to_a_device_name_keeps_parameter_identity(device):
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    parameters = model.parameters()
    before = [p.numpy().copy() for p in parameters]
    assert model.to(device.name) is model
    assert model.parameters() == parameters
    for p, values in zip(parameters, before):
        assert p.device is device
        np.testing.assert_array_equal(p.numpy(), values)
    assert model.modules[1].running_mean.device is device


def test_model_to_moves_gradients_too(cuda_device):
    layer = _trained_layer()
    grad = layer.weight.grad.numpy().copy()
    layer.to("cuda")
    assert layer.weight.device is cuda_device and layer.weight.grad.device is cuda_device
    np.testing.assert_array_equal(layer.weight.grad.numpy(), grad)
    layer.to("cpu")
    assert layer.weight.grad.device is ndl.cpu()


def test_a_failed_move_moves_nothing():
    if ndl.cuda().enabled():
        pytest.skip("needs a machine where the CUDA device is unavailable")
    model = nn.Linear(3, 2)
    with pytest.raises(RuntimeError, match="not available"):
        model.to("cuda")
    assert all(p.device is ndl.cpu() for p in model.parameters())


def test_model_to_an_unknown_device_says_which():
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        nn.Linear(2, 2).to("gpu")
