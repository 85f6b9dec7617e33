"""SoftmaxCrossEntropy labels: integer ids and whole-number floats are accepted; anything else is named."""
import numpy as np
import pytest

import needle as ndl
from needle import nn, ops
from needle.ops.ops_fused import LabelRangeError

LOGITS = np.array([[1.0, 2.0, 0.5], [0.1, -1.0, 3.0]], dtype=np.float32)


def _loss_and_grad(labels, device):
    logits = ndl.Tensor(LOGITS, device=device)
    loss = nn.SoftmaxLoss()(logits, labels)
    loss.backward()
    return loss.numpy(), logits.grad.numpy()


@pytest.mark.parametrize("bad, shown", [(1.7, "1.7"), (-0.5, "-0.5"), (np.nan, "nan"), (np.inf, "inf"), (0.25, "0.25")])
def test_a_float_label_that_is_not_a_whole_number_is_named(bad, shown, device, graph_baseline):
    logits = ndl.Tensor(LOGITS, device=device)
    labels = ndl.Tensor([0.0, bad], device=device)
    before = graph_baseline()
    with pytest.raises(ValueError, match=rf"label {shown} \(at position 1\) is not a class id.*dtype='int64'"):
        nn.SoftmaxLoss()(logits, labels)
    assert graph_baseline().live_nodes == before.live_nodes
    assert logits.grad is None


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "uint16", "uint32", "uint64"])
def test_out_of_range_integer_labels_on_the_cpu_are_an_index_error(dtype):
    logits = ndl.Tensor(LOGITS)
    with pytest.raises(IndexError, match=r"label 3 \(at position 1\) is out of range for 3 classes.*\[0, 3\)"):
        ops.softmax_cross_entropy(logits, ndl.Tensor(np.array([0, 3], dtype=dtype)))


def test_negative_integer_labels_are_an_index_error():
    with pytest.raises(LabelRangeError, match=r"label -1 \(at position 0\)"):
        ops.softmax_cross_entropy(ndl.Tensor(LOGITS), ndl.Tensor(np.array([-1, 0])))


def test_out_of_range_float_labels_are_an_index_error_on_every_device(device):
    labels = ndl.Tensor([2.0, 3.0], device=device)
    with pytest.raises(IndexError, match=r"label 3.0 \(at position 1\) is out of range for 3 classes"):
        ops.softmax_cross_entropy(ndl.Tensor(LOGITS, device=device), labels)


def test_a_uint64_label_too_large_for_an_index_is_named_not_wrapped(graph_baseline):
    # numpy would read 2**64 - 1 as index -1 (the last class): it must be refused, not wrapped
    before = graph_baseline()
    with pytest.raises(LabelRangeError, match=r"label 18446744073709551615 \(at position 1\)"):
        ops.softmax_cross_entropy(ndl.Tensor(LOGITS), ndl.Tensor(np.array([0, 2**64 - 1], dtype=np.uint64)))
    assert graph_baseline().live_nodes == before.live_nodes


def test_an_out_of_range_uint8_label_raises_before_the_op_keeps_anything(graph_baseline):
    before = graph_baseline()
    with pytest.raises(LabelRangeError, match=r"label 200 \(at position 0\)"):
        nn.SoftmaxLoss()(ndl.Tensor(LOGITS, requires_grad=True), ndl.Tensor(np.array([200, 0], dtype=np.uint8)))
    after = graph_baseline()
    assert (after.live_nodes, after.live_bytes) == (before.live_nodes, before.live_bytes)


def test_the_range_error_is_also_a_value_error_as_before():
    with pytest.raises(ValueError):
        ops.softmax_cross_entropy(ndl.Tensor(LOGITS), ndl.Tensor(np.array([0, 9])))


def test_whole_number_float_labels_give_the_same_loss_and_gradient_as_integer_labels(device):
    as_floats = _loss_and_grad(ndl.Tensor([2, 0], device=device), device)  # a list: float32
    as_ints = _loss_and_grad(ndl.Tensor(np.array([2, 0], dtype=np.int64), device=device), device)
    as_uint8 = _loss_and_grad(ndl.Tensor(np.array([2, 0], dtype=np.uint8), device=device), device)
    for result in (as_floats, as_uint8):
        np.testing.assert_array_equal(result[0], as_ints[0])
        np.testing.assert_array_equal(result[1], as_ints[1])


def test_bool_labels_are_refused_by_dtype():
    with pytest.raises(TypeError, match="needs integer class labels, got dtype bool"):
        ops.softmax_cross_entropy(ndl.Tensor(LOGITS), ndl.Tensor(np.array([True, False])))


def test_integer_labels_on_a_gpu_are_not_range_checked_and_give_nan(cuda_device):
    logits = ndl.Tensor(LOGITS, device=cuda_device)
    loss = ops.softmax_cross_entropy(logits, ndl.Tensor(np.array([0, 7]), device=cuda_device))
    assert np.isnan(loss.numpy())
