"""A graph built from values that changed afterwards must not backward() silently (the data clock)."""
import numpy as np
import pytest

import needle as ndl
from needle import nn, ops, optim

pytestmark = pytest.mark.needle_backend("nd")  # asserts the float32 default

BOTH_PATHS = pytest.mark.parametrize("create_graph", [True, False], ids=["course", "fast"])


@BOTH_PATHS
def test_assigning_data_after_the_forward_makes_backward_raise(create_graph, device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    y = (x * x).sum()
    x.data = [10.0, 20.0]
    with pytest.raises(RuntimeError, match=r"Tensor \(shape \(2,\), dtype float32\), input 0 of EWiseMul") as error:
        y.backward(create_graph=create_graph)
    assert "Run the forward pass again" in str(error.value)
    assert x.grad is None, "a failed backward must leave every .grad as it was"


@BOTH_PATHS
def test_a_failed_backward_leaves_earlier_gradients_unchanged(create_graph, device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    w = ndl.Tensor([3.0, 4.0], device=device)
    (x * w).sum().backward(create_graph=create_graph)
    x_grad, w_grad = x.grad, w.grad
    y = (x * w).sum()
    w.data = [0.0, 0.0]
    with pytest.raises(RuntimeError, match="had its data changed"):
        y.backward(create_graph=create_graph)
    assert x.grad is x_grad and w.grad is w_grad


@BOTH_PATHS
def test_rebuilding_the_graph_after_the_change_works(create_graph, device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    (x * x).sum()
    x.data = [10.0, 20.0]
    (x * x).sum().backward(create_graph=create_graph)
    np.testing.assert_array_equal(x.grad.numpy(), [20.0, 40.0])


@BOTH_PATHS
def test_changing_a_tensor_outside_the_graph_does_not_matter(create_graph, device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    other = ndl.Tensor([5.0], device=device)
    y = (x * x).sum()
    other.data = [6.0]
    y.backward(create_graph=create_graph)
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


@BOTH_PATHS
def test_a_changed_constant_input_is_caught_too(create_graph, device):
    """The data batch is saved for the weight's gradient: changing it changes that gradient."""
    batch = ndl.Tensor(np.ones((2, 3)), device=device, requires_grad=False)
    w = ndl.Tensor(np.ones((3, 1)), device=device)
    loss = (batch @ w).sum()
    batch.data = np.zeros((2, 3), dtype=np.float32)
    with pytest.raises(RuntimeError, match=r"input 0 of MatMul"):
        loss.backward(create_graph=create_graph)
    assert w.grad is None


@BOTH_PATHS
def test_a_changed_node_output_is_caught(create_graph, device):
    x = ndl.Tensor([0.0, 1.0], device=device)
    y = ops.exp(x)  # Exp's gradient reads its own output
    y.data = [5.0, 5.0]
    with pytest.raises(RuntimeError, match="the output of Exp"):
        y.backward(create_graph=create_graph)


@BOTH_PATHS
@pytest.mark.parametrize("make_optimizer", [lambda p: optim.SGD(p, lr=0.1, momentum=0.9), lambda p: optim.Adam(p, lr=0.1)])
def test_an_optimizer_step_leaves_older_graphs_usable_as_in_the_course(make_optimizer, create_graph, device):
    """A graph carried across a step (an undetached recurrent state) still backpropagates, with the
    weights as they are now; the MemoryMonitor reports such a loop as a leak."""
    np.random.seed(0)
    model = nn.Linear(3, 2, device=device)
    optimizer = make_optimizer(model.parameters())
    batch = ndl.Tensor(np.ones((4, 3)), device=device, requires_grad=False)
    loss = model(batch).sum()
    loss.backward(create_graph=create_graph)
    optimizer.step()  # updates the parameters in place
    optimizer.reset_grad()
    loss.backward(create_graph=create_graph)
    fresh = nn.Linear(3, 2, device=device)
    fresh.load_state_dict(model.state_dict())
    fresh(batch).sum().backward(create_graph=create_graph)
    np.testing.assert_allclose(model.weight.grad.numpy(), fresh.weight.grad.numpy(), rtol=1e-6)


def test_load_state_dict_makes_old_graphs_stale(device):
    np.random.seed(0)
    model = nn.Linear(3, 2, device=device)
    loss = model(ndl.Tensor(np.ones((1, 3)), device=device)).sum()
    model.load_state_dict(model.state_dict())
    with pytest.raises(RuntimeError, match="had its data changed"):
        loss.backward()


def test_mark_data_changed_covers_writes_into_the_array(device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    y = (x * x).sum()
    x.realize_cached_data()[0:1] = ndl.NDArray([7.0], device=device)
    ndl.autograd.mark_data_changed(x)
    with pytest.raises(RuntimeError, match="input 0 of EWiseMul"):
        y.backward()


def test_lazy_mode_uses_the_values_current_when_the_graph_is_computed(device):
    saved = ndl.autograd.LAZY_MODE
    ndl.autograd.LAZY_MODE = True
    try:
        x = ndl.Tensor([1.0, 2.0], device=device)
        y = (x * x).sum()
        x.data = [3.0, 4.0]  # before anything was computed: the forward will see these values
        y.backward()
        assert y.numpy() == 25.0
        np.testing.assert_array_equal(x.grad.numpy(), [6.0, 8.0])
    finally:
        ndl.autograd.LAZY_MODE = saved


def test_repeated_backward_on_an_unchanged_graph_still_works(device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    y = (x * x).sum()
    for create_graph in (True, False, True):
        y.backward(create_graph=create_graph)
        np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])
