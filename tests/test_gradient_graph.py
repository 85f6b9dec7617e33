"""The course backward()'s leaf gradients: values computed as arrays, graphs built only when differentiated.

See needle/gradient_graph.py: a leaf's ``.grad`` is one GradientTensor node; the gradient graph it
stands for is built when a later backward() goes through it, from the live forward graph or,
once that is freed, from the recipe it left; no reference cycle ties a leaf to its gradient.
"""
import gc

import numpy as np
import pytest

import needle as ndl
from needle import gradient_graph, nn, ops


@pytest.fixture
def no_garbage_collector():
    """Reference counting alone: what a cycle would keep stays counted."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def test_a_leaf_gradient_is_one_node_over_the_leaves_it_depends_on(device):
    x = ndl.Tensor([1.0, 2.0], device=device, dtype="float64")
    w = ndl.Tensor([3.0, 4.0], device=device, dtype="float64")
    before = ndl.autograd.snapshot().nodes_created
    y = (x * w * x).sum()
    forward = ndl.autograd.snapshot().nodes_created - before
    y.backward()
    assert ndl.autograd.snapshot().nodes_created - before == forward + 2, "one node per leaf, no gradient graph"
    assert isinstance(x.grad, gradient_graph.GradientTensor) and isinstance(x.grad.op, gradient_graph.GradientGraph)
    assert set(map(id, x.grad.inputs)) == {id(x), id(w)} and x.grad.requires_grad
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 16.0])  # 2 x w


def test_the_course_gradient_of_gradient_check_builds_the_graph_once_it_is_differentiated():
    x2, x3 = ndl.Tensor([6.0]), ndl.Tensor([0.0])
    y = x2 * x2 + x2 * x3
    y.backward()
    grad_x2, grad_x3 = x2.grad, x3.grad
    grad_x2.backward()
    assert (grad_x2.numpy(), grad_x3.numpy(), x2.grad.numpy(), x3.grad.numpy()) == ([12.0], [6.0], [2.0], [1.0])


def _hessian_vector_product(device, keep_output):
    """d/dx of sum(v * dL/dx) for L = sum(exp(x) * x), i.e. (exp(x)(x + 2)) * v."""
    x = ndl.Tensor([0.5, -1.0, 2.0], device=device, dtype="float64")
    loss = (ops.exp(x) * x).sum()
    loss.backward()
    if not keep_output:
        del loss  # the recipe takes over
    first = x.grad
    x.grad = None
    (first * ndl.Tensor([1.0, 2.0, 3.0], device=device, dtype="float64")).sum().backward()
    return x.grad.numpy()


@pytest.mark.parametrize("keep_output", [True, False], ids=["output kept", "output freed"])
def test_second_order_is_the_same_whether_the_output_lives_or_not(keep_output, device):
    x = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(_hessian_vector_product(device, keep_output), np.exp(x) * (x + 2) * [1, 2, 3], rtol=1e-12)


def test_a_loop_that_rebinds_its_weights_frees_each_graph_without_the_collector(device, no_garbage_collector):
    """The course's hw1 loop: ``W = Tensor(W.numpy() - lr * W.grad.numpy())``; no leaf-gradient cycle keeps old steps."""
    rng = np.random.default_rng(0)
    w = ndl.Tensor(rng.normal(size=(4, 3)), device=device, dtype="float64")
    batch = ndl.Tensor(rng.normal(size=(5, 4)), device=device, dtype="float64", requires_grad=False)
    live = []
    for _ in range(6):
        loss = ops.relu(batch @ w).sum()
        loss.backward()
        w = ndl.Tensor(w.numpy() - 0.1 * w.grad.numpy(), device=device, dtype="float64")
        del loss
        live.append((ndl.autograd.snapshot().live_nodes, ndl.autograd.snapshot().live_bytes))
    assert len(set(live)) == 1, f"live nodes and bytes grew from step to step: {live}"


def test_create_graph_true_keeps_the_graph_through_the_gradients_as_pytorch_does(device, no_garbage_collector):
    x = ndl.Tensor([1.0, 2.0], device=device, dtype="float64")
    ops.exp(x).sum().backward(create_graph=True)
    before = ndl.autograd.snapshot().live_nodes
    x_grad = x.grad
    del x
    assert ndl.autograd.snapshot().live_nodes == before, "the gradient keeps the graph (and its leaf)"
    x_grad.backward()  # d exp(x) / dx = exp(x): the graph is there
    del x_grad
    gc.collect()  # the cycle leaf <-> gradient is the collector's, as in PyTorch
    assert ndl.autograd.snapshot().live_nodes < before


def test_a_training_step_never_copies_a_recipe(device, monkeypatch):
    """A step function's ``loss`` dies at its return, while the parameters' gradients live on; the
    optimizer step has retired their graphs (they would mix old and new weights), so nothing is copied."""
    made = []
    real_init = gradient_graph.GraphRecipe.__init__

    def counting_init(self, output, leaf_refs):
        made.append(output)
        real_init(self, output, leaf_refs)

    monkeypatch.setattr(gradient_graph.GraphRecipe, "__init__", counting_init)
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(4, 8, device=device), nn.ReLU(), nn.Linear(8, 3, device=device))
    opt = ndl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    batch = ndl.Tensor(np.random.default_rng(1).normal(size=(6, 4)), device=device, requires_grad=False)
    labels = ndl.Tensor(np.array([0, 1, 2, 0, 1, 2]), device=device, dtype="int64")

    def step():
        opt.reset_grad()
        loss = nn.SoftmaxLoss()(model(batch), labels)
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    assert made == []
    weight = model.modules[0].weight
    with pytest.raises(RuntimeError, match=r"optimizer step has updated the parameters.*before opt.step\(\)"):
        (weight.grad * 2.0).sum().backward()


def test_a_recipe_counts_the_bytes_it_keeps_and_lets_them_go_with_the_gradient(device, no_garbage_collector):
    x = ndl.Tensor(np.ones((64, 64)), device=device, dtype="float64")
    base = ndl.autograd.snapshot().live_bytes
    loss = ops.exp(x * 2.0).sum()
    forward = ndl.autograd.snapshot().live_bytes - base  # the graph's arrays: two 64x64 and the sum
    loss.backward()
    del loss  # the inner nodes and their gradients go; their forward arrays stay, in the recipe
    seed = 8  # the ones backward() seeded with, a float64 scalar, kept to build the graph from
    assert ndl.autograd.snapshot().live_bytes - base == forward + x.grad.realize_cached_data().nbytes + seed
    x.grad = None
    assert ndl.autograd.snapshot().live_bytes == base


def test_a_failing_backward_changes_no_gradient(device):
    class Broken(ops.Exp):
        def gradient_data(self, out_grad, node):
            raise ValueError("broken gradient")

    x = ndl.Tensor([1.0, 2.0], device=device, dtype="float64")
    w = ndl.Tensor([3.0, 4.0], device=device, dtype="float64")
    x.grad = w.grad = None
    y = (Broken()(x) * w).sum()
    with pytest.raises(ValueError, match="broken gradient"):
        y.backward()
    assert x.grad is None and w.grad is None and y.grad is None


def test_a_gradient_outliving_its_leaf_still_reaches_the_other_leaves(device, no_garbage_collector):
    """``g = x.grad; del x``: the second order still flows to ``w`` through the recipe."""
    w = ndl.Tensor([1.5, -0.5], device=device, dtype="float64")

    def first_gradient():
        x = ndl.Tensor([2.0, 3.0], device=device, dtype="float64")
        (x * x * w).sum().backward()  # d/dx = 2 x w
        return x.grad

    g = first_gradient()  # x and the output are gone
    w.grad = None
    g.sum().backward()  # d/dw of sum(2 x w) = 2 x
    np.testing.assert_allclose(w.grad.numpy(), [4.0, 6.0], rtol=1e-12)


def test_two_backward_calls_from_one_output_each_keep_their_own_graph(device, no_garbage_collector):
    x = ndl.Tensor([1.0, 2.0], device=device, dtype="float64")
    y = (x * x * x).sum()
    y.backward()
    first = x.grad
    y.backward()  # a second pass from the same output, then the first's gradient goes
    second = x.grad
    del first
    del y  # the second pass's gradient now lives on the recipe
    second.backward()  # d(3 x^2)/dx = 6 x
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 12.0], rtol=1e-12)


def test_a_model_with_gradients_pickles_and_copies_them_as_values(device):
    import copy
    import pickle

    np.random.seed(0)
    model = nn.Sequential(nn.Linear(3, 4, device=device), nn.ReLU(), nn.Linear(4, 2, device=device))
    batch = ndl.Tensor(np.random.default_rng(2).normal(size=(5, 3)), device=device, requires_grad=False)
    labels = ndl.Tensor(np.array([0, 1, 0, 1, 1]), device=device, dtype="int64")
    loss = nn.SoftmaxLoss()(model(batch), labels)
    loss.backward()
    weight = model.modules[0].weight
    for restored in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        grad = restored.modules[0].weight.grad
        assert grad.op is None and not isinstance(grad, gradient_graph.GradientTensor)
        np.testing.assert_array_equal(grad.numpy(), weight.grad.numpy())


def test_a_seed_that_is_a_leaf_of_the_graph_is_differentiated_once(device):
    """``y.backward(x)`` for y = x * x: x.grad = 2 x^2, whose derivative is 4 x (not twice that)."""
    x = ndl.Tensor([3.0], device=device, dtype="float64")
    y = x * x
    y.backward(x)
    first = x.grad
    assert first.numpy().tolist() == [18.0] and len(first.inputs) == 1
    first.backward()
    assert x.grad.numpy().tolist() == [12.0]


def test_pickled_and_copied_tensors_are_counted_while_they_live_and_uncounted_after(device):
    """A restored tensor is made as new ones are: live tensors and bytes count it, and freeing it
    takes back exactly what it added (no buffer token of the original is carried over)."""
    import copy
    import gc
    import pickle

    model = nn.Sequential(nn.Linear(3, 4, device=device), nn.ReLU(), nn.Linear(4, 2, device=device))
    gc.collect()
    before = ndl.autograd.snapshot()
    copies = [pickle.loads(pickle.dumps(model)), copy.deepcopy(model)]
    during = ndl.autograd.snapshot()
    parameters = len(model.parameters())
    assert during.live_tensors - before.live_tensors == 2 * parameters
    name = device.name
    assert during.bytes_by_device[name] - before.bytes_by_device.get(name, 0) == 2 * sum(
        p.numpy().nbytes for p in model.parameters()
    )
    assert all(isinstance(p, nn.Parameter) for restored in copies for p in restored.parameters())
    del copies
    gc.collect()
    after = ndl.autograd.snapshot()
    assert after.live_tensors == before.live_tensors
    assert after.bytes_by_device.get(name, 0) == before.bytes_by_device.get(name, 0)


def test_the_outputs_grad_is_its_seed_as_in_the_course(device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    y = x * 3.0
    y.backward()
    assert y.grad.op is None and not y.grad.requires_grad and y.grad.numpy().tolist() == [1.0, 1.0]
    seed = ndl.Tensor([0.5, 2.0], device=device, requires_grad=False)
    y.backward(seed)
    assert y.grad is seed  # the course's backward() gives the output the tensor it was seeded with
    assert x.grad.numpy().tolist() == [1.5, 6.0]
    graph_seed = ndl.Tensor([1.0, 1.0], device=device) * 2.0  # a seed with a graph: its value, detached
    y.backward(graph_seed)
    assert y.grad is not graph_seed and y.grad.op is None and y.grad.numpy().tolist() == [2.0, 2.0]
