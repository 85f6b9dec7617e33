"""Every op given a bad argument: the error type, a message that names the op and the argument, and nothing changed."""
import numpy as np
import pytest

import needle as ndl
from needle import ops

A_VALUES = np.arange(6.0, dtype=np.float32).reshape(2, 3)


def _a(device):
    return ndl.Tensor(A_VALUES, device=device)


# (id, make(a, device), error type, regex the message must match: the op and the bad argument)
CASES = [
    ("reshape-str", lambda a, d: a.reshape("6"), TypeError, r"Reshape: shape must be an int or a tuple of ints, got str '6'"),
    ("reshape-none", lambda a, d: ops.reshape(a, None), TypeError, r"Reshape: shape .* got NoneType None"),
    ("reshape-float-entry", lambda a, d: a.reshape((2.0, 3)), TypeError, r"Reshape: shape \(2.0, 3\) holds float 2.0"),
    ("reshape-bool-entry", lambda a, d: a.reshape((True, 6)), TypeError, r"Reshape: shape \(True, 6\) holds bool"),
    ("reshape-two-inferred", lambda a, d: a.reshape((-1, -1)), ValueError, r"Reshape: shape \(-1, -1\) has more than one -1"),
    ("reshape-negative", lambda a, d: a.reshape((-2, -3)), ValueError, r"Reshape: shape \(-2, -3\) has a negative size"),
    ("reshape-size", lambda a, d: a.reshape((4, 2)), ValueError, r"Reshape: cannot reshape \(2, 3\) \(6 elements\) into \(4, 2\)"),
    ("sum-float", lambda a, d: a.sum(1.5), TypeError, r"Summation: axes must be None, an int or a tuple of ints, got float 1.5"),
    ("sum-str", lambda a, d: a.sum("0"), TypeError, r"Summation: axes .* got str '0'"),
    ("sum-bool", lambda a, d: a.sum(True), TypeError, r"Summation: axes .* got bool True"),
    ("sum-float-in-tuple", lambda a, d: a.sum((0, 1.0)), TypeError, r"Summation: axes .* got tuple \(0, 1.0\)"),
    ("sum-out-of-range", lambda a, d: a.sum(5), IndexError, r"Summation: axis 5 is out of range for a tensor with 2 dimensions"),
    ("sum-negative-out-of-range", lambda a, d: a.sum(-3), ValueError, r"Summation: axis -3 is out of range .*valid: -2 to 1"),
    ("sum-duplicate", lambda a, d: a.sum((0, 0)), ValueError, r"Summation: axes \(0, 0\) name the same axis more than once"),
    ("sum-duplicate-negative", lambda a, d: a.sum((1, -1)), ValueError, r"Summation: axes \(1, -1\) name the same axis"),
    ("transpose-out-of-range", lambda a, d: a.transpose((0, 2)), IndexError, r"Transpose: axis 2 is out of range"),
    ("transpose-repeated", lambda a, d: a.transpose((1, 1)), ValueError, r"Transpose: axes \(1, 1\) name the same axis twice"),
    ("transpose-same-axis-negative", lambda a, d: a.transpose((0, -2)), ValueError, r"Transpose: axes \(0, -2\) name the same axis"),
    ("transpose-three-axes", lambda a, d: a.transpose((0, 1, 2)), ValueError, r"Transpose swaps two axes; got axes=\(0, 1, 2\)"),
    ("transpose-str", lambda a, d: a.transpose("ab"), TypeError, r"Transpose: axes .* got str 'ab'"),
    ("transpose-1d", lambda a, d: ndl.Tensor([1.0], device=d).transpose(), ValueError, r"Transpose needs at least 2 dimensions, got a tensor with 1"),
    ("broadcast-incompatible", lambda a, d: a.broadcast_to((3, 3)), ValueError, r"BroadcastTo: cannot broadcast shape \(2, 3\) to \(3, 3\)"),
    ("broadcast-fewer-axes", lambda a, d: a.broadcast_to((3,)), ValueError, r"BroadcastTo: cannot broadcast shape \(2, 3\) to \(3,\)"),
    ("broadcast-negative", lambda a, d: a.broadcast_to((2, -1)), ValueError, r"BroadcastTo: shape \(2, -1\) has a negative size"),
    ("broadcast-str", lambda a, d: a.broadcast_to("x"), TypeError, r"BroadcastTo: shape must be .* got str 'x'"),
    ("matmul-mismatch", lambda a, d: a @ a, ValueError, r"MatMul: shapes \(2, 3\) @ \(2, 3\) do not fit"),
    ("matmul-vector", lambda a, d: a @ ndl.Tensor([1.0, 2.0, 3.0], device=d), ValueError, r"MatMul needs operands with at least 2 dimensions"),
    ("matmul-batch", lambda a, d: ndl.Tensor(np.ones((2, 2, 3)), device=d) @ ndl.Tensor(np.ones((3, 3, 2)), device=d), ValueError, r"MatMul: shapes \(2, 2, 3\) @ \(3, 3, 2\) do not fit: the batch axes \(2,\) and \(3,\)"),
    ("matmul-int", lambda a, d: a @ 3, TypeError, r"MatMul: input 1 is int 3, not a Tensor"),
    ("add-function-int", lambda a, d: ops.add(a, 3), TypeError, r"EWiseAdd: input 1 is int 3, not a Tensor"),
    ("add-function-numpy", lambda a, d: ops.multiply(np.ones(3), a), TypeError, r"EWiseMul: input 0 is ndarray"),
    ("exp-str", lambda a, d: ops.exp("x"), TypeError, r"Exp: input 0 is str 'x', not a Tensor"),
    ("add-shapes", lambda a, d: a + ndl.Tensor(np.ones((4, 5)), device=d), ValueError, r"EWiseAdd: .*\(2, 3\), \(4, 5\)"),
    ("add-scalar-str", lambda a, d: a + "1", TypeError, r"AddScalar takes a Python number, got str"),
    ("sub-scalar-str", lambda a, d: a - "1", TypeError, r"AddScalar takes a Python number, got str"),
    ("rsub-scalar-list", lambda a, d: [1] - a, TypeError, r"AddScalar takes a Python number, got list"),
    ("mul-scalar-complex", lambda a, d: a * 1j, TypeError, r"MulScalar takes a Python number, got complex"),
    ("div-scalar-none", lambda a, d: a / None, TypeError, r"DivScalar takes a Python number, got NoneType"),
    ("power-scalar-str", lambda a, d: a ** "2", TypeError, r"PowerScalar takes a Python number, got str"),
    ("add-scalar-overflow-float", lambda a, d: a + 2**1100, OverflowError, r"AddScalar: the number .* does not fit the tensor's dtype \(float32\)"),
    ("stack-empty", lambda a, d: ops.stack([], 0), ValueError, r"Stack needs at least one tensor"),
    ("stack-shapes", lambda a, d: ops.stack([a, ndl.Tensor(np.ones((4, 5)), device=d)], 0), ValueError, r"Stack needs tensors of one shape"),
    ("stack-axis", lambda a, d: ops.stack([a, a], 5), IndexError, r"Stack: axis 5 is out of range for a tensor with 3 dimensions"),
    ("stack-float-axis", lambda a, d: ops.stack([a, a], 0.5), TypeError, r"Stack: axis must be an int, got float 0.5"),
    ("stack-not-a-list", lambda a, d: ops.stack(a, 0), TypeError, r"stack takes a list of Tensors, got Tensor"),
    ("stack-numpy-member", lambda a, d: ops.stack([a, np.ones((2, 3))], 0), TypeError, r"MakeTensorTuple: input 1 is ndarray"),
    ("split-axis", lambda a, d: ops.split(a, 5), IndexError, r"Split: axis 5 is out of range"),
    ("split-float-axis", lambda a, d: ops.split(a, 1.0), TypeError, r"Split: axis must be an int, got float"),
    ("tuple-index", lambda a, d: ops.make_tuple(a, a)[5], IndexError, r"TupleGetItem: index 5 is out of range for a tuple of 2 tensors"),
    ("tuple-index-of-split", lambda a, d: ops.split(a, 0)[2], IndexError, r"TupleGetItem: index 2 is out of range"),
    ("tuple-index-str", lambda a, d: ops.make_tuple(a)["0"], TypeError, r"TupleGetItem: index must be an int, got str"),
    ("flip-axis", lambda a, d: ops.flip(a, (5,)), IndexError, r"Flip: axis 5 is out of range"),
    ("flip-float", lambda a, d: ops.flip(a, 0.5), TypeError, r"Flip: axes .* got float 0.5"),
    ("dilate-negative", lambda a, d: ops.dilate(a, (0,), -1), ValueError, r"Dilate: dilation must be a non-negative int .* got int -1"),
    ("dilate-float", lambda a, d: ops.dilate(a, (0,), 1.5), TypeError, r"Dilate: dilation must be an int, got float 1.5"),
    ("dilate-axis", lambda a, d: ops.dilate(a, (-5,), 1), ValueError, r"Dilate: axis -5 is out of range"),
    ("undilate-negative", lambda a, d: ops.undilate(a, (0,), -2), ValueError, r"UnDilate: dilation must be a non-negative int"),
    ("logsumexp-axis", lambda a, d: ops.logsumexp(a, 5), IndexError, r"LogSumExp: axis 5 is out of range"),
    ("logsumexp-float", lambda a, d: ops.logsumexp(a, 1.5), TypeError, r"LogSumExp: axes .* got float 1.5"),
    ("logsoftmax-axis", lambda a, d: ops.logsoftmax(a, 5), IndexError, r"LogSoftmax: axis 5 is out of range"),
    ("logsoftmax-tuple", lambda a, d: ops.logsoftmax(a, (0, 1)), TypeError, r"LogSoftmax: axis must be an int, got tuple"),
    ("fused-add-scalars-str", lambda a, d: ops.fused_add_scalars(a, "1", 2), TypeError, r"FusedAddScalars takes a Python number, got str"),
    ("linear-features", lambda a, d: ops.linear(a, ndl.Tensor(np.ones((4, 5)), device=d)), ValueError, r"LinearOp: input has 3 features"),
    ("cross-entropy-shapes", lambda a, d: ops.softmax_cross_entropy(a, ndl.Tensor([1.0], device=d)), ValueError, r"SoftmaxCrossEntropy needs logits of shape \(batch, classes\)"),
]


@pytest.mark.parametrize("make, error, pattern", [pytest.param(*case[1:], id=case[0]) for case in CASES])
def test_bad_argument_names_the_op_and_the_argument(make, error, pattern, device):
    with pytest.raises(error, match=pattern):
        make(_a(device), device)


@pytest.mark.parametrize("make, error", [pytest.param(*case[1:3], id=case[0]) for case in CASES])
def test_a_failed_op_changes_nothing(make, error, device, graph_baseline):
    a = _a(device)
    before = graph_baseline()
    with pytest.raises(error):
        make(a, device)
    after = graph_baseline()
    np.testing.assert_array_equal(a.numpy(), A_VALUES)
    assert a.grad is None and a.op is None
    assert after.live_nodes == before.live_nodes, "a failed op left a graph node behind"


def test_axis_errors_are_value_and_index_errors_as_numpy_and_pytorch_users_expect():
    a = ndl.Tensor(A_VALUES)
    for caught in (ValueError, IndexError):
        with pytest.raises(caught):
            a.sum(7)


def test_bad_arguments_fail_when_the_op_is_made_not_later(lazy_mode):
    a = ndl.Tensor(A_VALUES)
    with pytest.raises(TypeError, match="Summation"):
        a.sum(1.5)
    with pytest.raises(TypeError, match="Reshape"):
        a.reshape("6")


def test_range_errors_surface_when_a_lazy_graph_is_realized(lazy_mode):
    with pytest.raises(IndexError, match="Summation: axis 5"):
        ndl.Tensor(A_VALUES).sum(5).numpy()  # lazy: the node is made, the range check runs on compute


def test_good_arguments_still_work(device):
    a = _a(device)
    assert a.sum(np.int64(1)).shape == (2,)
    assert a.sum([0, 1]).shape == ()
    assert a.sum(-1).shape == (2,)
    assert a.broadcast_to(np.array([4, 2, 3])).shape == (4, 2, 3)
    assert ops.flip(a, 1).numpy().tolist() == [[2.0, 1.0, 0.0], [5.0, 4.0, 3.0]]
    assert ops.dilate(a, 0, 1).shape == (4, 3)
    assert ops.stack([a, a], -1).shape == (2, 3, 2)
    assert ops.split(a, -1)[-1].numpy().tolist() == [2.0, 5.0]
