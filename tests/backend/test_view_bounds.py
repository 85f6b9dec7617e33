"""Every view of the course's NDArray interface lies within its handle: ``NDArray.make``,
``as_strided``, the device's ``to_numpy``/``compact``/``ewise_setitem``/``scalar_setitem`` and
its element-wise functions refuse anything that would read or write outside the buffer, and a
refused call changes nothing."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from needle.backend_ndarray import NDArray

# (shape, strides, offset) of views of a 4-element handle that reach outside it
OUTSIDE_A_HANDLE_OF_4 = [
    ((4,), (3,), 0, "elements 0 to 9"),  # strides past the end
    ((1,), (1,), 4, "elements 4 to 4"),  # an offset at the end
    ((2,), (1,), 3, "elements 3 to 4"),  # a compact view running off the end
    ((4,), (-1,), 2, "elements -1 to 2"),  # a negative stride before the start
    ((2, 2), (-2, 1), 1, "elements -1 to 2"),
    ((2, 3), (0, 2), 0, "elements 0 to 4"),  # broadcast rows, columns too far
]


def base_on(device, size=4):
    return NDArray(np.arange(size, dtype=np.float32), device=device)


@pytest.mark.parametrize("shape, strides, offset, reach", OUTSIDE_A_HANDLE_OF_4)
def test_make_refuses_a_view_outside_its_handle(shape, strides, offset, reach, device):
    base = base_on(device)
    with pytest.raises(IndexError) as caught:
        NDArray.make(shape, strides=strides, device=device, handle=base._handle, offset=offset)
    message = str(caught.value)
    for words in (f"shape={shape}", f"strides={strides}", f"offset={offset}", reach, "handle of 4 elements"):
        assert words in message
    np.testing.assert_array_equal(base.numpy(), [0, 1, 2, 3])


def test_make_refuses_a_negative_offset_with_or_without_strides(device):
    base = base_on(device)
    for strides in (None, (1,), (2,)):
        with pytest.raises(IndexError, match=r"offset=-1\): the offset is negative.*0 or more"):
            NDArray.make((1,), strides=strides, device=device, handle=base._handle, offset=-1)
    with pytest.raises(IndexError, match="offset is negative"):
        NDArray.make((0,), device=device, handle=base._handle, offset=-2)


def test_make_refuses_malformed_layouts(device):
    base = base_on(device)
    with pytest.raises(ValueError, match="one entry per axis, got 2 and 1"):
        NDArray.make((2, 2), strides=(1,), device=device, handle=base._handle)
    with pytest.raises(ValueError, match="negative sizes"):
        NDArray.make((-1,), strides=(1,), device=device, handle=base._handle)
    with pytest.raises(TypeError, match="strides must hold integers"):
        NDArray.make((2,), strides=(1.5,), device=device, handle=base._handle)
    with pytest.raises(TypeError, match="shape must be a tuple of integers"):
        NDArray.make((2.0,), device=device, handle=base._handle)


def test_views_at_the_edges_of_the_handle_are_fine(device):
    base = base_on(device)
    handle = base._handle
    last = NDArray.make((1,), device=device, handle=handle, offset=3)
    backwards = NDArray.make((4,), strides=(-1,), device=device, handle=handle, offset=3)
    broadcast = NDArray.make((3, 2), strides=(0, 2), device=device, handle=handle, offset=1)
    empty_far_away = NDArray.make((0, 5), strides=(100, 7), device=device, handle=handle, offset=50)
    scalar = NDArray.make((), device=device, handle=handle, offset=2)
    assert last.numpy().tolist() == [3.0] and backwards.numpy().tolist() == [3.0, 2.0, 1.0, 0.0]
    assert broadcast.numpy().tolist() == [[1.0, 3.0]] * 3
    assert empty_far_away.shape == (0, 5) and scalar.numpy().tolist() == 2.0


def test_as_strided_stays_within_the_buffer(device):
    a = NDArray(np.arange(12, dtype=np.float32).reshape(3, 4), device=device)
    with pytest.raises(IndexError, match=r"as_strided\(shape=\(4, 4\), strides=\(4, 1\), offset=0\).*handle of 12"):
        a.as_strided((4, 4), (4, 1))
    row = a[1:2]  # a view may reach past its own elements into the rest of its buffer
    assert row.as_strided((2, 4), (4, 1)).numpy().tolist() == [[4, 5, 6, 7], [8, 9, 10, 11]]
    with pytest.raises(IndexError, match=r"offset=4\) reaches elements 4 to 15 of a handle of 12"):
        row.as_strided((3, 4), (4, 1))
    with pytest.raises(IndexError, match="reaches elements -4 to 4 "):
        row.as_strided((3,), (-4,))
    np.testing.assert_array_equal(a.numpy(), np.arange(12).reshape(3, 4))


@pytest.mark.parametrize("shape, strides, offset, reach", OUTSIDE_A_HANDLE_OF_4)
def test_device_functions_refuse_views_outside_the_handle_and_change_nothing(shape, strides, offset, reach, device):
    source, target = base_on(device)._handle, base_on(device)._handle
    count = int(np.prod(shape))
    out = device.Array(count)
    device.fill(out, -7.0)
    calls = {
        "to_numpy": lambda: device.to_numpy(source, shape, strides, offset),
        "compact": lambda: device.compact(source, out, shape, strides, offset),
        "ewise_setitem": lambda: device.ewise_setitem(out, target, shape, strides, offset),
        "scalar_setitem": lambda: device.scalar_setitem(count, 5.0, target, shape, strides, offset),
    }
    for name, call in calls.items():
        with pytest.raises(IndexError, match=rf"{name}\(shape=.*{reach} of a handle of 4 elements"):
            call()
    for handle in (source, target):
        assert NDArray(handle.array, device=device).numpy().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert NDArray(out.array, device=device).numpy().tolist() == [-7.0] * count


def test_elementwise_functions_refuse_handles_of_other_sizes(device):
    four, three, out = device.Array(4), device.Array(3), device.Array(4)
    one = device.Array(1)
    for handle, value in ((four, 1.0), (three, 2.0), (one, 3.0), (out, -1.0)):
        device.fill(handle, value)
    with pytest.raises(ValueError, match="ewise_add: .*a has 4, b has 3, out has 4"):
        device.ewise_add(four, three, out)
    with pytest.raises(ValueError, match="ewise_mul: .*b has 1"):  # numpy would broadcast it
        device.ewise_mul(four, one, out)
    with pytest.raises(ValueError, match="scalar_add: .*a has 3, out has 4"):
        device.scalar_add(three, 1.0, out)
    with pytest.raises(ValueError, match="compact: out has 4 elements, the view of shape \\(3,\\) has 3"):
        device.compact(four, out, (3,), (1,), 0)
    assert NDArray(out.array, device=device).numpy().tolist() == [-1.0] * 4


# ---- a process that writes through every kind of view exits cleanly ---------------------------
VIEW_WRITER = textwrap.dedent(
    """
    import numpy as np
    from needle.backend_ndarray import NDArray, cpu

    device = cpu()
    for size in (1, 4, 16):
        base = NDArray(np.zeros(size, dtype=np.float32))
        handle = base._handle
        views = [
            NDArray.make((size,), device=device, handle=handle),
            NDArray.make((1,), device=device, handle=handle, offset=size - 1),
            NDArray.make((size,), strides=(-1,), device=device, handle=handle, offset=size - 1),
            NDArray.make((3, size), strides=(0, 1), device=device, handle=handle),
            NDArray.make(((size + 1) // 2,), strides=(2,), device=device, handle=handle),
            NDArray.make((0, 9), strides=(50, 50), device=device, handle=handle, offset=size + 10),
            base.as_strided((2, size), (0, 1)),
            base[size - 1 :].as_strided((size,), (-1,)),
        ]
        for view in views:
            view[...] = 1.0
            view.compact().fill(2.0)
        shape, strides, offset = (size,), (-1,), size - 1
        out = device.Array(size)
        device.compact(handle, out, shape, strides, offset)
        device.ewise_setitem(out, handle, shape, strides, offset)
        device.scalar_setitem(size, 3.0, handle, (size, 2), (1, 0), 0)
        device.to_numpy(handle, (size,), (1,), 0)
        refused = 0
        for bad in [((size,), (2,), 1), ((1,), (1,), size), ((2,), (-size,), 0), ((size,), (1,), -1)]:
            for call in (
                lambda: NDArray.make(bad[0], strides=bad[1], device=device, handle=handle, offset=bad[2]),
                lambda: device.scalar_setitem(1, 9.0, handle, *bad),
                lambda: device.ewise_setitem(out, handle, *bad),
                lambda: device.compact(handle, out, *bad),
            ):
                try:
                    call()
                except IndexError:
                    refused += 1
        assert refused == 16, refused
        assert np.all(base.numpy() == 3.0)
    print("all views written")
    """
)


def test_a_process_writing_through_every_kind_of_view_exits_cleanly():
    environment = dict(os.environ, MALLOC_CHECK_="3", MALLOC_PERTURB_="165")  # glibc: abort on heap damage
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), environment.get("PYTHONPATH")]))
    finished = subprocess.run(
        [sys.executable, "-X", "dev", "-c", VIEW_WRITER], env=environment, capture_output=True, text=True, timeout=120
    )
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.strip() == "all views written"
    assert "corrupt" not in finished.stderr and "free()" not in finished.stderr


def test_products_and_reductions_name_a_handle_too_small(device):
    small, big, out = device.Array(5), device.Array(64), device.Array(64)
    device.fill(out, -1.0)
    with pytest.raises(ValueError, match="matmul: a has 5 elements, the call needs 6"):
        device.matmul(small, big, out, 2, 3, 2)
    with pytest.raises(ValueError, match="matmul_tiled: out has 5 elements, the call needs 64"):
        device.matmul_tiled(big, big, small, 8, 8, 8)
    with pytest.raises(ValueError, match="reduce_sum: a has 5 elements, the call needs 6"):
        device.reduce_sum(small, device.Array(2), 3)
    with pytest.raises(ValueError, match="reduce_max: a has 5 elements"):
        device.reduce_max(small, device.Array(3), 2)
    assert NDArray(out.array, device=device).numpy().tolist() == [-1.0] * 64
