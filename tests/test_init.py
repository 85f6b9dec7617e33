"""needle.init: seeded draws equal the course's numpy calls; constants; Xavier/Kaiming scales."""
import math

import numpy as np
import pytest

import needle as ndl
from needle import init


def assert_tensor(t, expected, device, dtype="float32", requires_grad=False):
    assert isinstance(t, ndl.Tensor)
    assert t.device is device and t.dtype == np.dtype(dtype)
    assert t.requires_grad is requires_grad and t.op is None
    np.testing.assert_array_equal(t.numpy(), np.asarray(expected).astype(dtype))


def test_rand_equals_the_course_draw(device):
    np.random.seed(5)
    t = init.rand(3, 4, low=-2.0, high=3.0, device=device)
    np.random.seed(5)
    assert_tensor(t, np.random.rand(3, 4) * 5.0 - 2.0, device)


def test_rand_with_shape_tuple_dtype_and_requires_grad(device):
    np.random.seed(6)
    t = init.rand((2, 3), device=device, dtype="float64", requires_grad=True)
    np.random.seed(6)
    assert_tensor(t, np.random.rand(2, 3), device, "float64", requires_grad=True)


def test_randn_equals_the_course_draw(device):
    np.random.seed(7)
    t = init.randn(4, 2, mean=1.5, std=0.3, device=device)
    np.random.seed(7)
    assert_tensor(t, np.random.randn(4, 2) * 0.3 + 1.5, device)


def test_randb_equals_the_course_draw(device):
    np.random.seed(8)
    t = init.randb(5, 6, p=0.3, device=device)
    np.random.seed(8)
    assert_tensor(t, np.random.rand(5, 6) <= 0.3, device, "bool")
    np.random.seed(8)
    as_float = init.randb(5, 6, p=0.3, device=device, dtype="float32")
    np.random.seed(8)
    assert_tensor(as_float, np.random.rand(5, 6) <= 0.3, device)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_constants(device, dtype):
    assert_tensor(init.constant(2, 3, c=4.5, device=device, dtype=dtype), np.full((2, 3), 4.5), device, dtype)
    assert_tensor(init.ones(3, device=device, dtype=dtype), np.ones(3), device, dtype)
    assert_tensor(init.zeros((2, 2), device=device, dtype=dtype), np.zeros((2, 2)), device, dtype)
    assert_tensor(init.ones(2, device=device, dtype=dtype, requires_grad=True), np.ones(2), device, dtype, True)


def test_zeros_like_and_ones_like(device):
    x = ndl.Tensor(np.arange(6).reshape(2, 3), device=device, dtype="float64")
    assert_tensor(init.zeros_like(x), np.zeros((2, 3)), device, "float64")
    assert_tensor(init.ones_like(x, requires_grad=True), np.ones((2, 3)), device, "float64", True)


def test_one_hot(device):
    labels = ndl.Tensor([2, 0, 1, 2], device=device, dtype="int64", requires_grad=False)
    assert_tensor(init.one_hot(3, labels), np.eye(3)[[2, 0, 1, 2]], device)
    assert_tensor(init.one_hot(4, np.array([3, 1]), device=device, dtype="float64"), np.eye(4)[[3, 1]], device, "float64")
    assert_tensor(init.one_hot(3, [1], device=device), np.eye(3)[[1]], device)


def draw(fn, seed, *args, **kwargs):
    np.random.seed(seed)
    return fn(*args, **kwargs)


@pytest.mark.parametrize("gain", [1.0, 2.0])
def test_xavier_uniform(device, gain):
    t = draw(init.xavier_uniform, 1, 6, 4, gain=gain, device=device)
    bound = gain * math.sqrt(6 / (6 + 4))
    np.random.seed(1)
    assert_tensor(t, np.random.rand(6, 4) * 2 * bound - bound, device)


@pytest.mark.parametrize("gain", [1.0, 0.5])
def test_xavier_normal(device, gain):
    t = draw(init.xavier_normal, 2, 6, 4, gain=gain, device=device)
    std = gain * math.sqrt(2 / (6 + 4))
    np.random.seed(2)
    assert_tensor(t, np.random.randn(6, 4) * std, device)


def test_kaiming_uniform(device):
    t = draw(init.kaiming_uniform, 3, 5, 7, device=device)
    bound = math.sqrt(2) * math.sqrt(3 / 5)
    np.random.seed(3)
    assert_tensor(t, np.random.rand(5, 7) * 2 * bound - bound, device)


def test_kaiming_normal(device):
    t = draw(init.kaiming_normal, 4, 5, 7, device=device, dtype="float64", requires_grad=True)
    std = math.sqrt(2) / math.sqrt(5)
    np.random.seed(4)
    assert_tensor(t, np.random.randn(5, 7) * std, device, "float64", True)


@pytest.mark.parametrize("fn", [init.xavier_uniform, init.xavier_normal, init.kaiming_uniform, init.kaiming_normal])
def test_shape_argument_replaces_the_fans(fn, device):
    t = draw(fn, 9, 8, 4, shape=(3, 3, 8, 4), device=device)
    assert t.shape == (3, 3, 8, 4)
    same_scale = draw(fn, 9, 8, 4, device=device)
    np.testing.assert_array_equal(t.numpy().reshape(-1)[:32], same_scale.numpy().reshape(-1))


def test_kaiming_rejects_other_nonlinearities():
    with pytest.raises(ValueError, match="nonlinearity='relu'.*'tanh'"):
        init.kaiming_uniform(3, 4, nonlinearity="tanh")


def test_kaiming_uniform_statistics():
    t = draw(init.kaiming_uniform, 0, 100, 200)
    bound = math.sqrt(6 / 100)
    values = t.numpy()
    assert values.min() >= -bound and values.max() < bound
    assert abs(values.std() - bound / math.sqrt(3)) < 0.01


@pytest.mark.parametrize(
    "labels, named",
    [([1.5, 2.0], "1.5"), ([0.0, float("nan")], "nan"), (np.array([2.9, 1.0, 0.1]), "2.9, 0.1"), ([float("inf")], "inf")],
)
def test_one_hot_refuses_labels_that_are_not_whole_numbers(labels, named, device):
    for given in (labels, ndl.Tensor(np.asarray(labels, dtype=np.float64), device=device, dtype="float64")):
        with pytest.raises(ValueError, match=f"labels must be whole numbers, got {named} "):
            init.one_hot(3, given, device=device)
    with pytest.raises(ValueError, match="whole numbers"):
        device.one_hot(3, np.asarray(labels))


def test_one_hot_takes_whole_number_floats_as_the_course_loaders_give_them(device):
    for labels in ([2.0, 0.0], np.array([2, 0], dtype=np.uint8), ndl.Tensor([2.0, 0.0], device=device)):
        assert init.one_hot(3, labels, device=device).numpy().tolist() == [[0, 0, 1], [1, 0, 0]]
    with pytest.raises(TypeError, match="labels must be integers .* got dtype bool"):
        init.one_hot(2, np.array([True, False]), device=device)


def test_device_constructors_return_ndarrays_on_the_device_as_the_course_does(device):
    np.random.seed(3)
    expected_uniform = np.random.rand(2, 3).astype(np.float32)
    expected_normal = np.random.randn(4).astype(np.float32)
    np.random.seed(3)
    made = {
        "rand": (device.rand(2, 3), expected_uniform),
        "randn": (device.randn(4), expected_normal),
        "one_hot": (device.one_hot(3, np.array([1, 2])), np.eye(3, dtype=np.float32)[[1, 2]]),
        "empty": (device.empty((2, 2)), None),
        "full": (device.full((2,), 4.5), np.full(2, 4.5, np.float32)),
        "zeros": (device.zeros(3), np.zeros(3, np.float32)),
        "ones": (device.ones((1, 2), dtype="float64"), np.ones((1, 2))),
    }
    for name, (array, expected) in made.items():
        assert isinstance(array, ndl.NDArray) and array.device is device, name
        if expected is not None:
            assert array.dtype == expected.dtype, name
            np.testing.assert_array_equal(array.numpy(), expected, err_msg=name)
    assert made["empty"][0].shape == (2, 2) and made["empty"][0].dtype == np.float32
