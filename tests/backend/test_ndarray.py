"""NDArray: the course's array interface over numpy and CuPy, and the module functions."""
import numpy as np
import pytest

import needle as ndl
from needle import backend_ndarray as nd
from needle.backend_ndarray import NDArray

A = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 10


@pytest.fixture
def a(device):
    return NDArray(A.copy(), device=device)  # NDArray shares a numpy array it is given


def test_properties(a, device):
    assert a.shape == (2, 3, 4)
    assert a.strides == (12, 4, 1), "strides are in elements"
    assert a.device is device and a.dtype == np.float32
    assert a.size == 24 and a.ndim == 3 and len(a) == 2 and a.nbytes == 96
    assert NDArray(A, device=device).permute((2, 0, 1)).strides == (1, 12, 4)


def test_float32_by_default(device):
    assert NDArray([1, 2], device=device).dtype == np.float32
    assert NDArray([[1.5]], device=device).dtype == np.float32
    assert nd.array([1.0, 2.0], device=device).dtype == np.float32
    assert NDArray(np.zeros(2, dtype=np.float64), device=device, dtype="float32").dtype == np.float32
    assert NDArray(np.zeros(2, dtype=np.int64), device=device).dtype == np.int64


@pytest.mark.needle_backend("nd")  # asserts the float32 default
def test_tensor_of_a_float64_array_is_float32_unless_asked(device):
    data = np.array([1.0, 2.0])
    assert ndl.Tensor(data, device=device).dtype == np.float32
    assert ndl.Tensor(data, device=device, dtype="float64").dtype == np.float64
    assert ndl.Tensor(data, device=device, dtype=np.float64).dtype == np.float64
    assert ndl.Tensor(np.arange(3), device=device).dtype == np.int64


def test_no_silent_float64_upcast(a):
    results = (
        a * np.float64(2.0), a + np.float64(1.0), np.float64(2.0) * a, a / np.float64(3.0), a * 2.5,
        a - np.float64(1.0), np.float64(1.0) - a, a ** np.float64(2.0), a.maximum(np.float64(0.0)), a > np.float64(0.5),
    )
    for result in results[:-1]:
        assert isinstance(result, NDArray) and result.dtype == np.float32
    assert results[-1].dtype == np.bool_


def test_to_and_numpy(a, device):
    host = a.numpy()
    assert isinstance(host, np.ndarray)
    np.testing.assert_array_equal(host, A)
    assert a.to(device) is a
    on_cpu = a.to(ndl.cpu())
    assert on_cpu.device is ndl.cpu()
    np.testing.assert_array_equal(on_cpu.numpy(), A)


def test_to_cuda_and_back(cuda_device):
    a = NDArray(A)
    moved = a.to(cuda_device)
    assert moved.device is cuda_device and not isinstance(moved.raw, np.ndarray)
    np.testing.assert_array_equal(moved.to(ndl.cpu()).numpy(), A)


def test_np_asarray_and_course_style_access(device):
    t = ndl.Tensor(A, device=device)
    np.testing.assert_array_equal(np.asarray(t.cached_data), A)
    np.testing.assert_allclose(t.cached_data, A)
    np.testing.assert_allclose(t, A)
    assert t.cached_data.astype("float64").dtype == np.float64
    assert np.asarray(t.cached_data, dtype=np.float64).dtype == np.float64
    copy = ndl.Tensor(t.cached_data)
    assert copy.device is device
    np.testing.assert_array_equal(copy.numpy(), A)


def test_reshape_permute_broadcast(a):
    np.testing.assert_array_equal(a.reshape((6, 4)).numpy(), A.reshape(6, 4))
    np.testing.assert_array_equal(nd.reshape(a, (4, 6)).numpy(), A.reshape(4, 6))
    np.testing.assert_array_equal(a.permute((2, 0, 1)).numpy(), A.transpose(2, 0, 1))
    row = a[0, 0:1, :]
    np.testing.assert_array_equal(row.broadcast_to((5, 4)).numpy(), np.broadcast_to(A[0, 0:1], (5, 4)))
    np.testing.assert_array_equal(nd.broadcast_to(row, (2, 4)).numpy(), np.broadcast_to(A[0, 0:1], (2, 4)))
    assert row.broadcast_to((5, 4)).strides == (0, 1)


def test_getitem_and_setitem_with_slices(a):
    np.testing.assert_array_equal(a[1, 1:3, ::2].numpy(), A[1, 1:3, ::2])
    np.testing.assert_array_equal(a[:, -1].numpy(), A[:, -1])
    a[0, :, 1:3] = 7.0
    b = A.copy()
    b[0, :, 1:3] = 7.0
    np.testing.assert_array_equal(a.numpy(), b)
    a[1, 0] = NDArray(np.full(4, -1.0, dtype=np.float32), device=a.device)
    b[1, 0] = -1.0
    np.testing.assert_array_equal(a.numpy(), b)


def test_compact_and_as_strided(a):
    assert a.is_compact()
    assert a.compact() is a
    view = a.permute((1, 0, 2))
    assert not view.is_compact()
    compact = view.compact()
    assert compact.is_compact()
    np.testing.assert_array_equal(compact.numpy(), A.transpose(1, 0, 2))
    sliced = a[:, ::2, :]
    assert not sliced.is_compact()
    repeated = a.as_strided((3, 4), (0, 1))
    np.testing.assert_array_equal(repeated.numpy(), np.tile(A.reshape(-1)[:4], (3, 1)))
    windows = a.reshape((24,)).as_strided((5, 4), (4, 1))
    np.testing.assert_array_equal(windows.numpy(), A.reshape(-1)[:20].reshape(5, 4))


def test_arithmetic_with_scalars_and_arrays(a, device):
    B = A * 0.5 + 0.25  # no zeros: no division warnings
    b = NDArray(B, device=device)
    pairs = [
        (a + b, A + B), (a - b, A - B), (a * b, A * B), (a / b, A / B),
        (a + 2, A + 2), (2 + a, 2 + A), (a - 2, A - 2), (2 - a, 2 - A),
        (a * 3, A * 3), (3 * a, 3 * A), (a / 4, A / 4), (4 / b, 4 / B),
        (a**2, A**2), (-a, -A), ((b * b) ** b, (B * B) ** B),
    ]
    for got, want in pairs:
        assert isinstance(got, NDArray) and got.device is device
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_comparisons(a):
    b = NDArray(np.zeros_like(A), device=a.device)
    for got, want in [(a == 2, A == 2), (a != 2, A != 2), (a < b, A < 0), (a <= 0, A <= 0), (a > 0, A > 0), (a >= b, A >= 0)]:
        assert isinstance(got, NDArray)
        np.testing.assert_array_equal(got.numpy(), want)


def test_elementwise_functions(a):
    positive = a * a + 1
    P = A * A + 1
    np.testing.assert_allclose(a.maximum(0).numpy(), np.maximum(A, 0))
    np.testing.assert_allclose(nd.maximum(a, positive * 0).numpy(), np.maximum(A, 0))
    np.testing.assert_allclose(a.maximum(a * -1).numpy(), np.abs(A))
    np.testing.assert_allclose(positive.log().numpy(), np.log(P), rtol=1e-6)
    np.testing.assert_allclose(nd.log(positive).numpy(), np.log(P), rtol=1e-6)
    np.testing.assert_allclose((a * 0.1).exp().numpy(), np.exp(A * 0.1), rtol=1e-6)
    np.testing.assert_allclose(nd.exp(a * 0.1).numpy(), np.exp(A * 0.1), rtol=1e-6)
    np.testing.assert_allclose(a.tanh().numpy(), np.tanh(A), rtol=1e-6)
    np.testing.assert_allclose(nd.tanh(a).numpy(), np.tanh(A), rtol=1e-6)


def test_matmul(device):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = NDArray(x, device=device) @ NDArray(y, device=device)
    np.testing.assert_array_equal(got.numpy(), x @ y)
    batched = NDArray(np.stack([x, x + 1]), device=device) @ NDArray(y, device=device)
    np.testing.assert_array_equal(batched.numpy(), np.stack([x, x + 1]) @ y)


@pytest.mark.parametrize("axis", [None, 0, 1, 2, (0, 2), [1, 2]])
@pytest.mark.parametrize("keepdims", [False, True])
def test_sum_and_max(a, axis, keepdims):
    numpy_axis = tuple(axis) if isinstance(axis, list) else axis
    for got, want in [
        (a.sum(axis=axis, keepdims=keepdims), A.sum(axis=numpy_axis, keepdims=keepdims)),
        (nd.sum(a, axis=axis, keepdims=keepdims), A.sum(axis=numpy_axis, keepdims=keepdims)),
        (a.max(axis=axis, keepdims=keepdims), A.max(axis=numpy_axis, keepdims=keepdims)),
        (nd.max(a, axis=axis, keepdims=keepdims), A.max(axis=numpy_axis, keepdims=keepdims)),
    ]:
        assert isinstance(got, NDArray), "a reduction must return an NDArray (the numpy 0-d trap)"
        assert got.shape == np.shape(want)
        np.testing.assert_allclose(got.numpy(), want)


def test_full_reduction_is_a_0d_ndarray(a):
    for total in (a.sum(), a.max(), nd.sum(a), (a * 2).sum()):
        assert isinstance(total, NDArray) and total.shape == () and total.device is a.device
        assert isinstance(total.numpy(), np.ndarray)
        assert (total + 1).shape == ()
    assert float(a.sum()) == float(A.sum())


def test_flip_pad_fill(a):
    np.testing.assert_array_equal(a.flip((0, 2)).numpy(), np.flip(A, (0, 2)))
    np.testing.assert_array_equal(nd.flip(a, (1,)).numpy(), np.flip(A, 1))
    padded = a.pad(((0, 0), (1, 2), (0, 1)))
    assert padded.shape == (2, 6, 5)
    np.testing.assert_array_equal(padded.numpy(), np.pad(A, ((0, 0), (1, 2), (0, 1))))
    a.fill(3.5)
    np.testing.assert_array_equal(a.numpy(), np.full((2, 3, 4), 3.5, dtype=np.float32))


def test_module_constructors(device):
    for made, value in [(nd.full((2, 3), 1.5, device=device), 1.5), (nd.zeros((2, 3), device=device), 0), (nd.ones((2, 3), device=device), 1)]:
        assert made.shape == (2, 3) and made.dtype == np.float32 and made.device is device
        np.testing.assert_array_equal(made.numpy(), np.full((2, 3), value))
    empty = nd.empty((4, 2), dtype="float64", device=device)
    assert empty.shape == (4, 2) and empty.dtype == np.float64 and empty.device is device
    arr = nd.array([[1, 2]], dtype="float64", device=device)
    assert arr.dtype == np.float64 and arr.device is device


def test_mixing_devices_names_both(cuda_device):
    with pytest.raises(ValueError, match=r"cpu\(\).*cuda\(\)"):
        NDArray(A) + NDArray(A, device=cuda_device)


def test_devices():
    assert ndl.cpu() is ndl.cpu() and ndl.cpu().enabled()
    assert ndl.cpu_numpy() is ndl.cpu() and ndl.default_device() is ndl.cpu()
    assert repr(ndl.cpu()) == "cpu()"
    assert ndl.all_devices()[0] is ndl.cpu()
    if not ndl.cuda().enabled():
        with pytest.raises(RuntimeError, match="cuda\\(\\) is not available.*ndl.cpu\\(\\)"):
            ndl.cuda().xp


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_0d_arrays_keep_their_dtype_with_python_numbers(dtype, device):
    # NOTE: numpy 1 treats 0-d arrays as scalars (float32 0-d / 6 gave float64); numpy 2 does not.
    total = NDArray(np.arange(6).astype(dtype), device=device).max()  # a 0-d result of this dtype
    assert total.shape == ()
    results = [total + 1, 1 + total, total - 2, 2 - total, total * 3, 3 * total, total**2, total.maximum(1)]
    assert all(r.dtype == np.dtype(dtype) for r in results), [r.dtype for r in results]
    if dtype.startswith("float"):
        assert all(r.dtype == np.dtype(dtype) for r in (total / 6, 6 / total, total * 0.5, total + np.float64(0.5)))
    else:
        assert (total * 0.5).dtype == np.float64, "a Python float still makes an integer array float"
