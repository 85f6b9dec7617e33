"""The course's NDArray interface: numpy-2 inputs, ``flat``, ``process_slice``, ``_handle``,
``make``, and the device's handle functions (``matmul_tiled`` and the rest), written from the
course's documented API."""
import numpy as np
import pytest

import needle as ndl
from needle import backend_ndarray as nd
from needle.backend_ndarray import NDArray, ndarray_backend_numpy

NUMERIC_DTYPES = [
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64,
]


def sample(dtype):
    return (np.arange(6).reshape(2, 3) % 2).astype(dtype) if dtype is np.bool_ else np.arange(6).reshape(2, 3).astype(dtype)


class ArrayLikeWithStringDevice:
    """A foreign array whose ``.device`` is a string, as numpy 2 arrays (array API) have."""

    device = "cpu"

    def __init__(self, values):
        self.values = np.asarray(values)

    def __array__(self, dtype=None, copy=None):
        return self.values if dtype is None else self.values.astype(dtype)

    def __len__(self):
        return len(self.values)


# ---- numpy 2 arrays (whose .device is the string "cpu") --------------------------------------
@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=lambda d: np.dtype(d).name)
def test_array_of_every_numpy_dtype_with_and_without_device(dtype, device):
    host = sample(dtype)
    if np.lib.NumpyVersion(np.__version__) >= "2.0.0":
        assert host.device == "cpu", "numpy 2 arrays carry the array-API device string"
    for made in (nd.array(host, device=device), nd.array(host, dtype=None, device=device), NDArray(host, device=device)):
        assert made.device is device
    if device is ndl.cpu():
        for made in (nd.array(host), nd.array(host, dtype=None), NDArray(host), nd.array(host, dtype="float64")):
            assert made.device is ndl.cpu()
    assert nd.array(host, device=device).dtype == np.float32, "the course's array() makes float32"
    kept = nd.array(host, dtype=None, device=device)
    assert kept.dtype == host.dtype
    np.testing.assert_array_equal(kept.numpy(), host)
    np.testing.assert_array_equal(nd.array(host, device=device).numpy(), host.astype(np.float32))
    tensor = ndl.Tensor(host, device=device, requires_grad=False)
    assert tensor.device is device
    np.testing.assert_array_equal(tensor.numpy(), host)


def test_foreign_device_attributes_are_host_data():
    foreign = ArrayLikeWithStringDevice([[1.0, 2.0]])
    for made in (nd.array(foreign), NDArray(foreign), ndl.Tensor(foreign).realize_cached_data()):
        assert made.device is ndl.cpu()
        np.testing.assert_array_equal(made.numpy(), [[1.0, 2.0]])
    assert nd.device_of(foreign) is ndl.cpu()
    assert nd.device_of(ndl.Tensor([1.0])) is ndl.cpu()
    zeros = ndl.init.zeros_like(np.ones((2, 3)))
    assert zeros.device is ndl.cpu() and zeros.shape == (2, 3)


# ---- flat: a 1-D view that writes through -----------------------------------------------------
def test_flat_writes_through_the_course_gradient_check_way(device):
    x = ndl.Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=device)
    data = x.realize_cached_data()
    assert len(data.flat) == data.size == 6
    data.flat[4] += 0.5
    x.realize_cached_data().flat[0] -= 2.0
    np.testing.assert_array_equal(x.numpy(), [[-2.0, 1.0, 2.0], [3.0, 4.5, 5.0]])
    assert isinstance(data.flat[4], np.floating) and data.flat[4] == 4.5
    assert data.flat[-1] == 5.0
    with pytest.raises(IndexError, match="flat index 6 is out of bounds.*size 6"):
        data.flat[6]


def test_flat_of_a_strided_view_writes_into_its_base(device):
    base = NDArray(np.arange(12, dtype=np.float32).reshape(3, 4), device=device)
    view = base.permute((1, 0))[1:3]  # not contiguous: elements 1, 5, 9, 2, 6, 10 of base
    np.testing.assert_array_equal(list(view.flat), [1, 5, 9, 2, 6, 10])
    view.flat[1] = -5.0
    view.flat[3:5] = NDArray(np.array([-2.0, -6.0], dtype=np.float32), device=device)
    expected = np.arange(12, dtype=np.float32).reshape(3, 4)
    expected[1, 1], expected[0, 2], expected[1, 2] = -5.0, -2.0, -6.0
    np.testing.assert_array_equal(base.numpy(), expected)
    np.testing.assert_array_equal(view.flat[::2].numpy(), [1, 9, -6])


# ---- process_slice ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "given, expected",
    [
        (slice(None), slice(0, 5, 1)),
        (slice(2, None), slice(2, 5, 1)),
        (slice(None, 3), slice(0, 3, 1)),
        (slice(None, -1), slice(0, 4, 1)),
        (slice(-3, -1, 2), slice(2, 4, 2)),
        (slice(1, 5, 3), slice(1, 5, 3)),
    ],
)
def test_process_slice_fills_in_the_course_defaults(given, expected):
    a = NDArray(np.zeros((2, 5), dtype=np.float32))
    assert a.process_slice(given, 1) == expected
    assert a.process_slice(slice(None), 0) == slice(0, 2, 1)


@pytest.mark.parametrize("bad", [slice(None, None, -1), slice(3, 3), slice(4, 1), slice(5, 100), slice(-100, -5)])
def test_process_slice_refuses_what_the_course_refuses(bad):
    with pytest.raises(ValueError, match="positive steps"):
        NDArray(np.zeros(5, dtype=np.float32)).process_slice(bad, 0)


@pytest.mark.parametrize(
    "given, expected",
    [(slice(0, 100), slice(0, 5, 1)), (slice(-100, 3), slice(0, 3, 1)), (slice(2, 9, 2), slice(2, 5, 2))],
)
def test_process_slice_clamps_to_the_axis_as_numpy_indexing_does(given, expected):
    host = np.arange(5, dtype=np.float32)
    clamped = NDArray(host).process_slice(given, 0)
    assert clamped == expected
    np.testing.assert_array_equal(host[clamped], host[given])  # the same elements numpy picks


@pytest.mark.parametrize("axis", [2, -3, 7])
def test_process_slice_names_an_axis_out_of_range(axis):
    a = NDArray(np.zeros((2, 5), dtype=np.float32))
    with pytest.raises(IndexError, match=f"axis {axis} is out of bounds for an array of dimension 2"):
        a.process_slice(slice(None), axis)
    assert a.process_slice(slice(None), -1) == slice(0, 5, 1)
    with pytest.raises(TypeError, match="axis must be an int"):
        a.process_slice(slice(None), 1.0)
    with pytest.raises(TypeError, match="takes a slice"):
        a.process_slice(3, 0)


# ---- _handle, _offset, _strides and make ------------------------------------------------------
def test_views_share_the_handle_of_their_base(device):
    a = NDArray(np.arange(24, dtype=np.float32).reshape(2, 3, 4), device=device)
    ptr = a._handle.ptr()
    assert a._handle.size == 24 and a._offset == 0 and a._shape == (2, 3, 4) and a._device is device
    assert a._strides == (12, 4, 1)
    views = {
        "slice": (a[1, 1:, ::2], 12 + 4),
        "permute": (a.permute((2, 0, 1)), 0),
        "reshape": (a.reshape((6, 4)), 0),
        "broadcast": (a[0, 0:1, :].broadcast_to((5, 4)), 0),
        "row": (a[1, 2], 20),
    }
    if device is ndl.cpu():  # CuPy's as_strided keeps no base array (see course_api)
        views["as_strided"] = (a.as_strided((3, 4), (0, 1)), 0)
    for name, (view, offset) in views.items():
        assert view._handle.ptr() == ptr, name
        assert view._handle.size == 24, name
        assert view._offset == offset, name
    assert a[1, 1:, ::2]._strides == (4, 2)


def test_setitem_is_in_place(device):
    a = NDArray(np.zeros((3, 4), dtype=np.float32), device=device)
    ptr = a._handle.ptr()
    a[1:, ::2] = 5.0
    a[0] = NDArray(np.arange(4, dtype=np.float32), device=device)
    assert a._handle.ptr() == ptr
    np.testing.assert_array_equal(a.numpy(), [[0, 1, 2, 3], [5, 0, 5, 0], [5, 0, 5, 0]])


def test_is_compact_means_the_whole_buffer(device):
    a = NDArray(np.arange(12, dtype=np.float32).reshape(3, 4), device=device)
    assert a.is_compact() and a.compact() is a
    row = a[1:2]  # contiguous, but only part of the buffer: the course calls it not compact
    assert not row.is_compact()
    compact = row.compact()
    assert compact.is_compact() and compact._offset == 0 and compact._handle.size == 4
    assert compact._handle.ptr() != a._handle.ptr()
    np.testing.assert_array_equal(compact.numpy(), [[4, 5, 6, 7]])


def test_make_allocates_or_views_a_handle(device):
    fresh = NDArray.make((2, 3), device=device)
    assert fresh.shape == (2, 3) and fresh.dtype == np.float32 and fresh.device is device
    assert fresh._handle.size == 6 and fresh.is_compact()
    fresh.fill(1.5)
    base = NDArray(np.arange(8, dtype=np.float32), device=device)
    evens = NDArray.make((2, 2), strides=(4, 2), device=device, handle=base._handle, offset=0)
    tail = NDArray.make((2, 2), device=device, handle=base._handle, offset=4)
    np.testing.assert_array_equal(evens.numpy(), [[0, 2], [4, 6]])
    np.testing.assert_array_equal(tail.numpy(), [[4, 5], [6, 7]])
    assert tail._offset == 4 and tail._handle.ptr() == base._handle.ptr()
    tail[0, 0] = -1.0  # writes through into base
    assert base.numpy()[4] == -1.0
    assert NDArray.make((2,), dtype="float64", device=device).dtype == np.float64
    with pytest.raises(IndexError, match="reaches elements 4 to 8 of a handle of 8 elements"):
        NDArray.make((5,), device=device, handle=base._handle, offset=4)
    assert NDArray.compact_strides((2, 3, 4)) == (12, 4, 1)


def course_style_getitem(array, index):
    """The course's homework __getitem__: process_slice each axis, then make a view of _handle."""
    slices = [array.process_slice(s, dim) for dim, s in enumerate(index)]
    shape = tuple((s.stop - s.start + s.step - 1) // s.step for s in slices)
    strides = tuple(stride * s.step for stride, s in zip(array._strides, slices))
    offset = array._offset + sum(s.start * stride for s, stride in zip(slices, array._strides))
    return NDArray.make(shape, strides=strides, device=array.device, handle=array._handle, offset=offset)


def test_code_written_against_the_course_internals_runs(device):
    host = np.arange(30, dtype=np.float32).reshape(5, 6)
    a = NDArray(host, device=device)
    got = course_style_getitem(a, (slice(1, None, 2), slice(None, -1, 2)))
    np.testing.assert_array_equal(got.numpy(), host[1::2, :-1:2])
    nested = course_style_getitem(got, (slice(1, 2), slice(1, None)))
    np.testing.assert_array_equal(nested.numpy(), host[1::2, :-1:2][1:2, 1:])
    assert nested._handle.ptr() == a._handle.ptr()


# ---- the device's handle functions ----------------------------------------------------------
@pytest.mark.parametrize("m, n, p", [(8, 8, 8), (16, 24, 8), (8, 16, 32)])
def test_matmul_tiled_against_numpy(m, n, p, device):
    t = device.__tile_size__
    assert hasattr(device, "matmul_tiled") and t == 8
    rng = np.random.default_rng(0)
    left, right = rng.normal(size=(m, n)), rng.normal(size=(n, p))
    tiles = lambda x: x.reshape(x.shape[0] // t, t, x.shape[1] // t, t).transpose(0, 2, 1, 3)  # noqa: E731
    a = nd.array(tiles(left), device=device)
    b = nd.array(tiles(right), device=device)
    out = NDArray.make((m // t, p // t, t, t), device=device)
    device.matmul_tiled(a.compact()._handle, b.compact()._handle, out._handle, m, n, p)
    product = out.numpy().transpose(0, 2, 1, 3).reshape(m, p)
    np.testing.assert_allclose(product, left @ right, rtol=1e-4, atol=1e-4)


def test_matmul_tiled_names_a_dimension_off_the_tile(device):
    a = NDArray.make((1, 1, 8, 8), device=device)
    with pytest.raises(ValueError, match="tile size 8: n=12"):
        device.matmul_tiled(a._handle, a._handle, a._handle, 8, 12, 8)


def test_elementwise_scalar_and_reduction_functions(device):
    x = np.array([1.0, -2.0, 3.0, 0.5, 4.0, -1.0], dtype=np.float32)
    y = np.array([2.0, -2.0, 1.0, 1.0, 4.0, 3.0], dtype=np.float32)
    a, b = nd.array(x, device=device), nd.array(y, device=device)
    out = NDArray.make((6,), device=device)

    def run(name, *args):
        getattr(device, name)(*args, out._handle)
        return out.numpy().copy()

    H = lambda v: v._handle  # noqa: E731
    np.testing.assert_allclose(run("ewise_add", H(a), H(b)), x + y)
    np.testing.assert_allclose(run("scalar_add", H(a), 1.5), x + 1.5)
    np.testing.assert_allclose(run("ewise_mul", H(a), H(b)), x * y)
    np.testing.assert_allclose(run("scalar_mul", H(a), -2.0), x * -2)
    np.testing.assert_allclose(run("ewise_div", H(a), H(b)), x / y)
    np.testing.assert_allclose(run("scalar_div", H(a), 4.0), x / 4)
    np.testing.assert_allclose(run("scalar_power", H(b), 2.0), y**2)
    np.testing.assert_allclose(run("ewise_maximum", H(a), H(b)), np.maximum(x, y))
    np.testing.assert_allclose(run("scalar_maximum", H(a), 0.0), np.maximum(x, 0))
    np.testing.assert_array_equal(run("ewise_eq", H(a), H(b)), (x == y).astype(np.float32))
    np.testing.assert_array_equal(run("scalar_eq", H(a), 3.0), (x == 3).astype(np.float32))
    np.testing.assert_array_equal(run("ewise_ge", H(a), H(b)), (x >= y).astype(np.float32))
    np.testing.assert_array_equal(run("scalar_ge", H(a), 1.0), (x >= 1).astype(np.float32))
    np.testing.assert_allclose(run("ewise_exp", H(a)), np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(run("ewise_tanh", H(a)), np.tanh(x), rtol=1e-6)
    np.testing.assert_allclose(run("ewise_log", H(b * b)), np.log(y * y), rtol=1e-6)
    sums, maxima = NDArray.make((2,), device=device), NDArray.make((2,), device=device)
    device.reduce_sum(H(a), sums._handle, 3)
    device.reduce_max(H(a), maxima._handle, 3)
    np.testing.assert_allclose(sums.numpy(), x.reshape(2, 3).sum(axis=1))
    np.testing.assert_allclose(maxima.numpy(), x.reshape(2, 3).max(axis=1))
    product = NDArray.make((2, 2), device=device)
    device.matmul(H(a), H(b), product._handle, 2, 3, 2)
    np.testing.assert_allclose(product.numpy(), x.reshape(2, 3) @ y.reshape(3, 2), rtol=1e-6)


def test_layout_functions(device):
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = nd.array(host, device=device)
    out = device.Array(6)
    device.compact(a._handle, out, (2, 3), (1, 4), 1)  # host.T[1:3, :3]
    np.testing.assert_array_equal(out.array.tolist(), host.T[1:3, :3].reshape(-1))
    target = NDArray.make((3, 4), device=device)
    device.fill(target._handle, 0.0)
    device.ewise_setitem(out, target._handle, (2, 3), (1, 4), 1)
    device.scalar_setitem(3, 9.0, target._handle, (3,), (4,), 0)
    expected = np.zeros((3, 4), dtype=np.float32)
    expected.T[1:3, :3] = host.T[1:3, :3]
    expected[:, 0] = 9.0
    np.testing.assert_array_equal(target.numpy(), expected)
    fresh = device.Array(4)
    device.from_numpy(np.array([[1, 2], [3, 4]]), fresh)
    assert device.to_numpy(fresh, (2, 2), (1, 2), 0).tolist() == [[1, 3], [2, 4]]
    assert fresh.size == 4 and isinstance(fresh, nd.Handle)


def test_the_course_numpy_backend_module():
    backend = ndarray_backend_numpy
    assert backend.__device_name__ == "numpy" and backend._datatype == np.float32 and backend._datatype_size == 4
    handle = backend.Array(3)
    backend.fill(handle, 2.0)
    out = backend.Array(3)
    backend.scalar_mul(handle, 3.0, out)
    assert out.array.tolist() == [6.0, 6.0, 6.0]
    assert isinstance(handle, nd.cpu().Array)


def test_devices_answer_only_handle_function_names():
    assert nd.cpu().mod.__device_name__ == "numpy"
    with pytest.raises(AttributeError, match="cpu\\(\\) has no attribute 'ewise_ad'"):
        nd.cpu().ewise_ad


def test_handles_of_reinterpreted_and_foreign_buffers():
    base = np.arange(6, dtype=np.float32)
    as_ints = NDArray(base.view(np.int32))
    assert as_ints._handle.ptr() == NDArray(base)._handle.ptr() and as_ints._handle.array.dtype == np.int32
    buffer = bytearray(np.arange(8, dtype=np.float32).tobytes())
    columns = NDArray(np.ndarray((2, 2), dtype=np.float32, buffer=buffer, strides=(16, 4)))  # base: a bytearray
    assert columns._handle.size == 6 and columns._offset == 0  # elements 0..5 span the view
    np.testing.assert_array_equal(columns._handle.array, np.arange(6))
    columns._handle.array[5] = -1.0
    assert columns.numpy()[1, 1] == -1.0


@pytest.mark.parametrize("dtype", ["float32", None])
def test_array_copies_as_the_course_does(dtype, device):
    host = np.arange(4, dtype=np.float32)
    made = nd.array(host, dtype=dtype, device=device)
    again = nd.array(made, dtype=dtype)
    made.fill(-1.0)
    np.testing.assert_array_equal(host, np.arange(4))
    np.testing.assert_array_equal(again.numpy(), np.arange(4))
    foreign = ArrayLikeWithStringDevice(np.arange(3, dtype=np.float32))
    nd.array(foreign, dtype=dtype).fill(7.0)
    np.testing.assert_array_equal(foreign.values, np.arange(3))
    shared = NDArray(host)  # the class shares an array it is given, on purpose
    shared.fill(2.0)
    assert host.tolist() == [2.0] * 4


def test_a_strided_view_without_a_base_still_reports_the_buffer_it_was_made_over():
    """CuPy's as_strided gives views without a base; strided_view remembers the buffer (checked here
    with numpy arrays that have no base, as CuPy's views have none)."""
    import gc

    from needle.backend_ndarray import handles
    from needle.backend_ndarray.course_api import _flat_buffer

    memory = bytearray(np.arange(12, dtype=np.float32).tobytes())
    flat = np.frombuffer(memory, dtype=np.float32)  # its base is the bytearray, not an array

    def base_less(shape, offset, strides):
        return np.ndarray(shape, dtype=np.float32, buffer=memory, offset=offset, strides=strides)

    view = base_less((2, 2), 4, (16, 4))
    assert _flat_buffer(view, np).ctypes.data == view.ctypes.data  # unknown: the view is its own start
    handles.remember_base(view, flat)
    def is_flat(array):
        return array.ctypes.data == flat.ctypes.data and array.size == flat.size

    assert is_flat(_flat_buffer(view, np))
    nested = base_less((1, 2), 20, (16, 4))
    handles.remember_base(nested, _flat_buffer(view, np))
    assert is_flat(_flat_buffer(nested[0], np))  # through a slice of it too
    key = id(view)
    del view
    gc.collect()
    assert key not in handles._STRIDED_BASES  # forgotten with the view
