"""The graph: Value fields, the lecture's example, detach/data, lazy mode and backward's semantics."""
import numpy as np
import pytest

import needle as ndl
import needle.autograd
from needle import ops


# ---- the lecture's example ---------------------------------------------------------------
def lecture_graph(device):
    v1 = ndl.Tensor([0.0], device=device)
    v2 = ops.exp(v1)
    v3 = v2 + 1
    v4 = v2 * v3
    return v1, v2, v3, v4


def test_lecture_graph_structure(device, lazy_mode):
    v1, v2, v3, v4 = lecture_graph(device)
    assert v4.inputs[0] is v2 and v4.inputs[1] is v3
    assert len(v4.inputs) == 2
    assert isinstance(v4.op, ops.EWiseMul)
    assert isinstance(v3.op, ops.AddScalar) and v3.inputs[0] is v2
    assert isinstance(v2.op, ops.Exp) and v2.inputs[0] is v1
    assert v1.op is None and len(v1.inputs) == 0 and v1.is_leaf()
    assert all(v.requires_grad for v in (v1, v2, v3, v4))
    np.testing.assert_allclose(v4.numpy(), [2.0])


def test_lecture_gradient_as_tuple(device):
    v1, v2, v3, v4 = lecture_graph(device)
    grads = v4.op.gradient_as_tuple(ndl.Tensor([1.0], device=device), v4)
    assert isinstance(grads, tuple) and len(grads) == 2
    np.testing.assert_allclose(grads[0].numpy(), [2.0])  # d v4 / d v2 = v3
    np.testing.assert_allclose(grads[1].numpy(), [1.0])  # d v4 / d v3 = v2


@pytest.mark.parametrize("create_graph", [True, False])
def test_lecture_backward(create_graph, device, lazy_mode):
    v1, v2, v3, v4 = lecture_graph(device)
    v4.backward(create_graph=create_graph)
    np.testing.assert_allclose(v1.grad.numpy(), [3.0])
    if create_graph:
        np.testing.assert_allclose(v2.grad.numpy(), [3.0])
        np.testing.assert_allclose(v3.grad.numpy(), [1.0])
    else:
        assert v2.grad is None and v3.grad is None, "the fast path keeps no inner gradients"


def test_gradient_as_tuple_wraps_single_and_list_results():
    class One(needle.autograd.TensorOp):
        def gradient(self, out_grad, node):
            return out_grad

    class Many(needle.autograd.TensorOp):
        def gradient(self, out_grad, node):
            return [out_grad, out_grad]

    g = ndl.Tensor([1.0])
    assert One().gradient_as_tuple(g, None) == (g,)
    assert Many().gradient_as_tuple(g, None) == (g, g)


# ---- Value and Tensor basics -------------------------------------------------------------
@pytest.mark.needle_backend("nd")  # asserts the float32 default
def test_leaf_fields(device):
    x = ndl.Tensor([[1.0, 2.0, 3.0]], device=device)
    assert isinstance(x, needle.autograd.Value)
    assert isinstance(x.cached_data, ndl.NDArray)
    assert x.op is None and len(x.inputs) == 0
    assert x.requires_grad is True and x.grad is None
    assert x.shape == (1, 3) and x.dtype == np.float32 and x.device is device
    assert x.ndim == 2 and x.size == 3 and len(x) == 1
    # NOTE: the course's repr on the CPU; elsewhere the device too, as PyTorch's repr shows it
    suffix = "" if device.name == "cpu" else f", device={device!r}"
    assert repr(x) == f"needle.Tensor([[1. 2. 3.]]{suffix})"
    assert str(x) == "[[1. 2. 3.]]"
    np.testing.assert_array_equal(x.numpy(), [[1.0, 2.0, 3.0]])


def test_make_const(device):
    data = ndl.NDArray([1.0, 2.0], device=device)
    c = ndl.Tensor.make_const(data)
    assert c.cached_data is data
    assert c.op is None and len(c.inputs) == 0 and c.requires_grad is False
    assert ndl.Tensor.make_const(data, requires_grad=True).requires_grad is True
    from_tensor = ndl.Tensor.make_const(ndl.Tensor([5.0], device=device) * 2)
    np.testing.assert_array_equal(from_tensor.numpy(), [10.0])


def test_detach_shares_data_and_drops_the_graph(device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    y = x * 3
    d = y.detach()
    assert d.cached_data is y.cached_data
    assert d.op is None and len(d.inputs) == 0 and d.requires_grad is False
    assert isinstance(y.op, ops.MulScalar)


@pytest.mark.needle_backend("nd")  # asserts the float32 default
def test_data_property_and_setter(device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    y = x * 2
    data = y.data
    assert data.op is None and data.requires_grad is False and data.cached_data is y.cached_data
    x.data = ndl.Tensor([5.0, 6.0], device=device)
    np.testing.assert_array_equal(x.numpy(), [5.0, 6.0])
    assert x.requires_grad and x.op is None
    x.data = [7.0, 8.0]
    np.testing.assert_array_equal(x.numpy(), [7.0, 8.0])
    x.data = x.data - x.data * 0.5  # the course's SGD update form
    np.testing.assert_array_equal(x.numpy(), [3.5, 4.0])
    assert x.dtype == np.float32


@pytest.mark.needle_backend("nd")  # asserts the float32 default
def test_data_setter_refuses_another_dtype(device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    with pytest.raises(TypeError, match="dtype float64.*float32"):
        x.data = ndl.Tensor([1.0, 2.0], device=device, dtype="float64")


def test_bool_raises_on_non_scalars_and_item_works(device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    with pytest.raises(ValueError, match="ambiguous"):
        bool(x)
    assert bool(ndl.Tensor([2.0], device=device))
    assert x.sum().item() == 3.0 and isinstance(x.sum().item(), float)
    with pytest.raises(ValueError, match=r"one element.*\(2,\)"):
        x.item()


def test_constants_give_constants(device):
    a = ndl.Tensor([1.0], device=device, requires_grad=False)
    b = ndl.Tensor([2.0], device=device, requires_grad=False)
    c = a * b
    assert c.requires_grad is False and c.op is None and len(c.inputs) == 0
    x = ndl.Tensor([3.0], device=device)
    d = a * x
    assert d.requires_grad is True and d.inputs[0] is a and d.inputs[1] is x


# ---- lazy mode ---------------------------------------------------------------------------
def small_network(x, w):
    return ops.logsumexp(ops.relu(x @ w) * 2 - 1, axes=(1,)).sum()


def test_lazy_mode_defers_compute_and_gives_identical_results(device):
    rng = np.random.default_rng(0)
    x_data, w_data = rng.normal(size=(4, 3)), rng.normal(size=(3, 5))
    results = []
    saved = needle.autograd.LAZY_MODE
    try:
        for lazy in (False, True):
            needle.autograd.LAZY_MODE = lazy
            x = ndl.Tensor(x_data, device=device)
            w = ndl.Tensor(w_data, device=device)
            loss = small_network(x, w)
            assert (loss.cached_data is None) == lazy
            loss.backward()
            results.append((loss.numpy(), x.grad.numpy(), w.grad.numpy()))
    finally:
        needle.autograd.LAZY_MODE = saved
    for eager, lazy in zip(*results):
        np.testing.assert_array_equal(eager, lazy)


def test_lazy_constants_are_realized_on_demand(device):
    saved = needle.autograd.LAZY_MODE
    needle.autograd.LAZY_MODE = True
    try:
        a = ndl.Tensor([1.0, 2.0], device=device, requires_grad=False)
        b = (a + 1) * 3
        assert b.cached_data is None and b.requires_grad is False
        assert isinstance(b.op, ops.MulScalar)
        np.testing.assert_array_equal(b.numpy(), [6.0, 9.0])
        assert b.cached_data is not None and b.inputs[0].cached_data is not None
    finally:
        needle.autograd.LAZY_MODE = saved
    assert needle.autograd.LAZY_MODE is saved


# ---- backward ----------------------------------------------------------------------------
@pytest.mark.parametrize("cube", [lambda x: x**3, lambda x: x * x * x], ids=["power_scalar", "mul_chain"])
def test_gradient_of_gradient(cube, device):
    x = ndl.Tensor([3.0, -1.0], device=device, dtype="float64")
    y = cube(x).sum()
    y.backward()
    first = x.grad
    np.testing.assert_allclose(first.numpy(), [27.0, 3.0])  # 3 x^2
    assert first.op is not None and first.requires_grad, "create_graph=True must build a gradient graph"
    first.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [18.0, -6.0])  # 6 x


def test_gradient_of_relu_gradient(device):
    x = ndl.Tensor([2.0, -1.0, 0.5], device=device, dtype="float64")
    y = (ops.relu(x) * x * x).sum()  # x^3 where x > 0; the x * x factor reaches the gradient through the mask
    y.backward()
    first = x.grad
    np.testing.assert_allclose(first.numpy(), [12.0, 0.0, 0.75])  # 3 x^2 where x > 0
    first.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [12.0, 0.0, 3.0])  # 6 x where x > 0


@pytest.mark.parametrize("create_graph", [True, False])
def test_reused_values_accumulate_gradients(create_graph, device):
    x = ndl.Tensor([2.0], device=device)
    y = x * x + x + x * 4
    y.backward(create_graph=create_graph)
    np.testing.assert_allclose(x.grad.numpy(), [2 * 2.0 + 1 + 4])


@pytest.mark.needle_backend("nd")  # asserts the float32 default
def test_fast_path_leaves_only_constant_leaf_gradients(device):
    x = ndl.Tensor([[1.0, -2.0]], device=device)
    w = ndl.Tensor([[0.5], [3.0]], device=device)
    hidden = x @ w
    loss = ops.tanh(hidden).sum()
    loss.backward(create_graph=False)
    for leaf in (x, w):
        assert leaf.grad.op is None and len(leaf.grad.inputs) == 0 and leaf.grad.requires_grad is False
        assert leaf.grad.dtype == np.float32 and leaf.grad.device is device
    assert hidden.grad is None and loss.grad is None


def test_both_backward_paths_agree(device):
    rng = np.random.default_rng(1)
    data = [rng.normal(size=(4, 3)), rng.normal(size=(3, 2)), rng.normal(size=(2,))]
    grads = []
    for create_graph in (True, False):
        x, w, b = [ndl.Tensor(a, device=device, dtype="float64") for a in data]
        loss = ops.sigmoid(x @ w + b.broadcast_to((4, 2))).sum() / 3
        loss.backward(create_graph=create_graph)
        grads.append([t.grad.numpy() for t in (x, w, b)])
    for graph_grad, fast_grad in zip(*grads):
        np.testing.assert_allclose(graph_grad, fast_grad, rtol=1e-12)


def test_backward_with_out_grad(device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    y = x * x
    y.backward(ndl.Tensor([1.0, 10.0], device=device))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 40.0])
    y.backward(np.array([1.0, 0.5], dtype=np.float32), create_graph=False)
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


@pytest.mark.parametrize("create_graph", [True, False])
def test_backward_on_a_non_scalar_without_out_grad_seeds_ones(create_graph, device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    (x * x).backward(create_graph=create_graph)  # the course's rule; PyTorch would raise
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


def test_backward_on_a_constant_says_why(device):
    y = ndl.Tensor([1.0], device=device, requires_grad=False) * 2
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.backward()


def test_backward_with_a_wrong_out_grad_shape(device):
    y = ndl.Tensor([1.0, 2.0], device=device) * 2
    with pytest.raises(ValueError, match=r"out_grad has shape \(3,\).*\(2,\)"):
        y.backward(ndl.Tensor([1.0, 1.0, 1.0], device=device))


def test_deep_graphs_do_not_hit_the_recursion_limit(device):
    x = ndl.Tensor([1.0], device=device)
    y = x
    for _ in range(3000):
        y = y + 1
    y.backward(create_graph=False)
    np.testing.assert_array_equal(x.grad.numpy(), [1.0])
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0])


def test_find_topo_sort_puts_inputs_first(device):
    v1, v2, v3, v4 = lecture_graph(device)
    order = needle.autograd.find_topo_sort([v4])
    assert order == [v1, v2, v3, v4]
    visited, topo = set(), []
    needle.autograd.topo_sort_dfs(v4, visited, topo)
    assert topo == [v1, v2, v3, v4]
