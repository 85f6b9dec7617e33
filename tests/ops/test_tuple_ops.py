"""TensorTuple: one node holding several tensors; make_tuple, tuple_get_item, split and stack."""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from needle.autograd import TensorTuple


def test_make_tuple_is_one_node(device):
    a = ndl.Tensor([1.0, 2.0], device=device)
    b = ndl.Tensor([3.0], device=device)
    pair = ops.make_tuple(a, b)
    assert isinstance(pair, TensorTuple) and isinstance(pair.op, ops.MakeTensorTuple)
    assert pair.inputs[0] is a and pair.inputs[1] is b
    assert len(pair) == 2
    assert pair[0] is a and pair[1] is b, "items of make_tuple fold to its inputs"
    assert [t.numpy().tolist() for t in pair] == [[1.0, 2.0], [3.0]]
    assert repr(pair).startswith("needle.TensorTuple(")


def test_tuple_get_item_of_a_computed_tuple_is_a_node(device):
    x = ndl.Tensor(np.arange(6.0).reshape(2, 3), device=device)
    pieces = ops.split(x, 1)
    assert isinstance(pieces, TensorTuple) and len(pieces) == 3
    second = pieces[1]
    assert isinstance(second.op, ops.TupleGetItem) and second.inputs[0] is pieces
    np.testing.assert_array_equal(second.numpy(), [1.0, 4.0])


def test_split_then_stack_round_trips(device):
    data = np.arange(24.0).reshape(2, 3, 4)
    x = ndl.Tensor(data, device=device)
    for axis in range(3):
        pieces = ops.split(x, axis)
        assert len(pieces) == data.shape[axis]
        np.testing.assert_array_equal(ops.stack(list(pieces), axis).numpy(), data)


def test_tuple_addition_and_detach(device):
    a, b = ndl.Tensor([1.0], device=device), ndl.Tensor([2.0], device=device)
    total = ops.make_tuple(a, b) + ops.make_tuple(b, b)
    assert [t.numpy().tolist() for t in total] == [[3.0], [4.0]]
    detached = total.detach()
    assert detached.op is None and len(detached.inputs) == 0 and detached.requires_grad is False
    with pytest.raises(ValueError, match="same length"):
        ops.make_tuple(a) + ops.make_tuple(a, b)


@pytest.mark.parametrize("create_graph", [True, False])
def test_fused_add_scalars_gradient_sums_both_outputs(create_graph, device):
    x = ndl.Tensor([1.0, 2.0], device=device)
    first, second = ops.fused_add_scalars(x, 1.0, 10.0)
    np.testing.assert_array_equal(first.numpy(), [2.0, 3.0])
    np.testing.assert_array_equal(second.numpy(), [11.0, 12.0])
    (first * 2 + second * 3).sum().backward(create_graph=create_graph)
    np.testing.assert_array_equal(x.grad.numpy(), [5.0, 5.0])


@pytest.mark.parametrize("create_graph", [True, False])
def test_a_split_piece_used_alone_gets_zeros_elsewhere(create_graph, device):
    x = ndl.Tensor(np.ones((3, 2)), device=device)
    ops.split(x, 0)[1].sum().backward(create_graph=create_graph)
    np.testing.assert_array_equal(x.grad.numpy(), [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
