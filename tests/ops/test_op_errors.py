"""Bad inputs fail with errors that name the op, the shapes, the devices or the value given."""
import numpy as np
import pytest

import needle as ndl
from needle import ops


def tensor(shape, device):
    return ndl.Tensor(np.ones(shape), device=device)


@pytest.mark.parametrize(
    "make, pattern",
    [
        pytest.param(lambda a, b: a + b, r"EWiseAdd.*\(2, 3\).*\(4, 5\)", id="add"),
        pytest.param(lambda a, b: a * b, r"EWiseMul.*\(2, 3\).*\(4, 5\)", id="mul"),
        pytest.param(lambda a, b: a / b, r"EWiseDiv.*\(2, 3\).*\(4, 5\)", id="div"),
        pytest.param(lambda a, b: a @ b, r"MatMul.*\(2, 3\).*\(4, 5\)", id="matmul"),
        pytest.param(lambda a, b: ops.linear(a, b), r"LinearOp.*\(2, 3\).*\(4, 5\)", id="linear"),
        pytest.param(lambda a, b: ops.stack([a, b], 0), r"Stack.*\(2, 3\).*\(4, 5\)", id="stack"),
    ],
)
def test_shape_mismatch_names_the_op_and_both_shapes(make, pattern, device):
    with pytest.raises(ValueError, match=pattern):
        make(tensor((2, 3), device), tensor((4, 5), device))


def test_shape_mismatch_is_reported_in_lazy_mode_too(device, lazy_mode):
    a, b = tensor((2, 3), device), tensor((4, 5), device)
    with pytest.raises(ValueError, match=r"EWiseAdd.*\(2, 3\).*\(4, 5\)"):
        (a + b).numpy()


@pytest.mark.parametrize(
    "make, pattern",
    [
        pytest.param(lambda a: a.reshape((4, 2)), r"Reshape.*\(2, 3\).*\(4, 2\)", id="reshape"),
        pytest.param(lambda a: a.broadcast_to((3, 3)), r"BroadcastTo.*\(2, 3\).*\(3, 3\)", id="broadcast_to"),
        pytest.param(lambda a: a.sum(axes=5), r"axis 5 is out of range", id="summation"),
        pytest.param(lambda a: ops.matmul(a, ndl.Tensor([1.0, 2.0, 3.0])), r"MatMul.*at least 2 dimensions", id="matmul_vector"),
        pytest.param(lambda a: a.transpose((0, 1, 2)), r"Transpose swaps two axes", id="transpose_axes"),
    ],
)
def test_bad_shape_arguments(make, pattern, device):
    with pytest.raises(ValueError, match=pattern):
        make(tensor((2, 3), device))


@pytest.mark.parametrize("value", ["abc", {"a": 1}, None, b"xy", {1, 2}])
def test_non_numeric_input_says_what_was_given(value):
    with pytest.raises(TypeError, match=type(value).__name__):
        ndl.Tensor(value)


def test_ragged_list_says_what_was_given():
    with pytest.raises(TypeError, match=r"Tensor needs numbers.*list"):
        ndl.Tensor([[1.0, 2.0], [3.0]])


def test_list_of_strings_is_refused():
    with pytest.raises(TypeError, match="Tensor needs numbers"):
        ndl.Tensor(["a", "b"])


@pytest.mark.parametrize("dtype", ["float7", "not-a-dtype"])
def test_unknown_dtype_says_what_was_given(dtype):
    with pytest.raises(TypeError, match=f"unknown dtype '{dtype}'"):
        ndl.Tensor([1.0], dtype=dtype)
    with pytest.raises(TypeError, match=f"unknown dtype '{dtype}'"):
        ndl.init.zeros(2, dtype=dtype)


def test_scalar_op_with_a_string_says_what_was_given():
    with pytest.raises(TypeError, match="AddScalar takes a Python number, got str"):
        ndl.Tensor([1.0]) + "1"


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda a, b: a + b, id="add"),
        pytest.param(lambda a, b: a * b, id="mul"),
        pytest.param(lambda a, b: a @ b, id="matmul"),
    ],
)
def test_mixing_devices_names_both_devices(make, cuda_device):
    a = ndl.Tensor(np.ones((2, 2)), device=ndl.cpu())
    b = ndl.Tensor(np.ones((2, 2)), device=cuda_device)
    with pytest.raises(ValueError, match=r"cpu\(\).*cuda\(\)"):
        make(a, b)
    with pytest.raises(ValueError, match=r"cuda\(\).*cpu\(\)"):
        make(b, a)
