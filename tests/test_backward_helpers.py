"""backward.py's smaller pieces: the course's ``topo_sort_dfs``, the stale-graph message word for
word, and gradients of tuple values (``split``) summed on both backward paths."""
import numpy as np
import pytest
from gradcheck import check_gradients

import needle as ndl
from needle import ops
from needle.autograd import mark_data_changed
from needle.backward import topo_sort_dfs


def test_topo_sort_dfs_appends_each_node_once_and_marks_it_visited():
    x = ndl.Tensor([1.0, 2.0], requires_grad=True)
    shared = x * x
    first, second = shared + x, shared * 2.0
    visited, order = set(), []
    topo_sort_dfs(first, visited, order)
    assert order == [x, shared, first] and visited == {x, shared, first}
    topo_sort_dfs(second, visited, order)  # the part already visited is not added again
    assert order == [x, shared, first, second] and visited == set(order)


def test_the_stale_message_names_the_tensor_its_role_and_the_fix():
    x = ndl.Tensor(np.ones((2, 3), np.float32), requires_grad=True)
    y = (x * 3.0).sum()
    mark_data_changed(x)
    with pytest.raises(RuntimeError) as caught:
        y.backward()
    assert str(caught.value) == (
        "backward() cannot use this graph: a Tensor (shape (2, 3), dtype float32), input 0 of MulScalar, "
        "had its data changed after the graph was built (by `.data = ...`, load_state_dict, Module.to or "
        "mark_data_changed), so the gradient would mix old and new values. Run the forward pass again after "
        "changing it, then call backward(); to change a tensor and keep the graph, change a copy "
        "(ndl.Tensor(x))."
    )


def test_a_stale_tuple_is_named_as_a_tuple():
    x = ndl.Tensor(np.ones((2, 3)), dtype="float64", requires_grad=True)
    pieces = ops.split(x, 0)
    y = (pieces[0] * pieces[1]).sum()
    mark_data_changed(pieces)
    with pytest.raises(RuntimeError) as caught:
        y.backward(create_graph=False)
    assert str(caught.value).startswith("backward() cannot use this graph: a TensorTuple (a tuple), ")


@pytest.mark.parametrize("create_graph", [True, False])
def test_the_gradients_of_a_tuple_used_twice_are_summed_item_by_item(create_graph):
    x = ndl.Tensor(np.array([[1.0, 2.0], [3.0, 4.0]]), dtype="float64", requires_grad=True)
    pieces = ops.split(x, 0)
    y = (pieces[0] * pieces[1] + pieces[0] * 2.0 - pieces[1]).sum()
    y.backward(create_graph=create_graph)
    # d/dx0 = x1 + 2, d/dx1 = x0 - 1
    np.testing.assert_array_equal(x.grad.numpy(), [[5.0, 6.0], [0.0, 1.0]])


def test_tuple_gradients_match_central_differences(device):
    def pieces_used_twice(a):
        first, second, third = ops.split(a, 1)
        return first * second + ops.stack([third, first], 1).sum(axes=(1,)) * second

    check_gradients(pieces_used_twice, [np.random.default_rng(3).normal(size=(2, 3))], device)


@pytest.mark.parametrize("create_graph", [True, False])
def test_a_tuple_read_whole_and_by_its_items_gets_both_gradients(create_graph):
    a = ndl.Tensor(np.array([1.0, 2.0]), dtype="float64", requires_grad=True)
    b = ndl.Tensor(np.array([3.0, 4.0]), dtype="float64", requires_grad=True)
    pair = ops.split(ops.stack([a, b], 0), 0)  # a TensorTuple node (make_tuple's items fold away)
    whole = ops.Stack(0)(pair)  # reads the tuple as one value: its gradient is a whole tuple
    y = (whole * 1.0).sum() + (pair[0] * 2.0).sum() + (pair[1] * pair[1]).sum()
    y.backward(create_graph=create_graph)
    np.testing.assert_array_equal(a.grad.numpy(), [3.0, 3.0])
    np.testing.assert_array_equal(b.grad.numpy(), [7.0, 9.0])  # 1 + 2 b


def test_a_tuple_read_by_each_item_builds_its_gradient_tuple_once():
    def gradient_graph_size(items):
        x = ndl.Tensor(np.arange(2.0 * items).reshape(items, 2), dtype="float64", requires_grad=True)
        pieces = ops.split(x, 0)
        y = sum((pieces[i] * pieces[i]).sum() for i in range(items))
        y.backward(create_graph=True)
        np.testing.assert_array_equal(x.grad.numpy(), 2.0 * x.numpy())
        return len(ndl.autograd.find_topo_sort([x.grad]))

    # NOTE: one dense tuple from every item's gradient: the graph grows by the same count per item
    # read (summing one dense tuple per item would grow it by O(items) per item)
    sizes = [gradient_graph_size(items) for items in (4, 8, 12)]
    assert sizes[2] - sizes[1] == sizes[1] - sizes[0], sizes


def test_the_fast_path_builds_a_tuples_gradient_once_however_many_items_are_read():
    def tensors_made_by_backward(items):
        x = ndl.Tensor(np.arange(2.0 * items).reshape(items, 2), dtype="float64", requires_grad=True)
        pieces = ops.split(x, 0)
        y = sum((pieces[i] * pieces[i]).sum() for i in range(items))
        before = ndl.autograd.snapshot().tensors_created
        y.backward(create_graph=False)
        np.testing.assert_array_equal(x.grad.numpy(), 2.0 * x.numpy())
        return ndl.autograd.snapshot().tensors_created - before

    # NOTE: the same count more per item read; a dense tuple per item (TupleGetItem's own
    # gradient, zeros for every other item) would make O(items) more per item
    made = [tensors_made_by_backward(items) for items in (4, 8, 12)]
    assert made[2] - made[1] == made[1] - made[0], made
