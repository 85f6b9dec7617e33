"""The fast path (``backward(create_graph=False)``) does not enter values that need no gradient:
a branch made of constants only is neither traversed nor checked for stale data, while every
node on a path to a parameter still is.

Eagerly, a result that needs no gradient is detached at once (the course's rule), so a
constant-only branch with an op and inputs exists in lazy mode (``needle.autograd.LAZY_MODE``);
the graphs here are built lazily and computed before anything is changed.
"""
import numpy as np
import pytest

import needle as ndl
import needle.autograd
from needle.backward import compute_gradient_data, find_topo_sort


def constant_branch_graph():
    """``loss = sum(w * (a + b))`` with ``a``, ``b`` constants: ``a + b`` is a constant-only branch."""
    saved = needle.autograd.LAZY_MODE
    needle.autograd.LAZY_MODE = True
    try:
        w = ndl.Tensor([1.0, 2.0], requires_grad=True)
        a = ndl.Tensor([3.0, 4.0], requires_grad=False)
        b = ndl.Tensor([0.5, 0.5], requires_grad=False)
        branch = a + b
        loss = (w * branch).sum()
    finally:
        needle.autograd.LAZY_MODE = saved
    assert branch.op is not None and tuple(branch.inputs) == (a, b)
    assert not branch.requires_grad
    loss.numpy()  # computed now, from the data as it is
    return w, a, b, branch, loss


def test_the_fast_path_does_not_visit_a_constant_only_branch():
    w, a, b, branch, loss = constant_branch_graph()
    pruned = find_topo_sort([loss], prune_constants=True)
    assert branch not in pruned and a not in pruned and b not in pruned
    assert w in pruned and pruned[-1] is loss
    full = find_topo_sort([loss])
    assert all(node in full for node in (w, a, b, branch))
    order = compute_gradient_data(loss, ndl.Tensor(1.0).realize_cached_data(), lambda grad: ndl.Tensor(grad))
    assert set(order) == set(pruned)


def test_a_changed_constant_only_branch_is_not_stale_checked_on_the_fast_path():
    w, a, _, branch, loss = constant_branch_graph()
    a.data = ndl.Tensor([30.0, 40.0])  # changes a constant two steps below the loss
    with pytest.raises(RuntimeError, match="had its data changed after the graph was built"):
        loss.backward(create_graph=True)  # the course's path visits every node, and checks it
    w.grad = None
    loss.backward(create_graph=False)  # the fast path never reads a + b's inputs: no error
    np.testing.assert_array_equal(w.grad.numpy(), [3.5, 4.5])  # the branch as it was computed


def test_the_fast_path_still_checks_every_node_that_leads_to_a_parameter():
    w, _, b, branch, loss = constant_branch_graph()
    w.data = ndl.Tensor([5.0, 5.0])  # a parameter changed after the forward
    with pytest.raises(RuntimeError, match=r"input 0 of EWiseMul"):
        loss.backward(create_graph=False)
    assert w.grad is None


def test_a_changed_constant_read_directly_by_a_node_on_the_path_is_still_caught():
    w = ndl.Tensor([1.0, 2.0], requires_grad=True)
    c = ndl.Tensor([3.0, 4.0], requires_grad=False)
    loss = (w * c).sum()
    c.data = ndl.Tensor([0.0, 0.0])  # an input of the product, which the fast path visits
    with pytest.raises(RuntimeError, match=r"input 1 of EWiseMul"):
        loss.backward(create_graph=False)
    assert w.grad is None


def test_gradients_through_a_pruned_graph_match_the_full_path():
    w, _, _, _, loss = constant_branch_graph()
    loss.backward(create_graph=False)
    fast = w.grad.numpy().copy()
    w.grad = None
    loss.backward(create_graph=True)
    np.testing.assert_array_equal(fast, w.grad.numpy())
    np.testing.assert_array_equal(fast, [3.5, 4.5])
