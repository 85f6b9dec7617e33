"""Arrays a CUDA step uploads from the host, redrawn before each launch (needle.compiler.host_uploads),
checked on the host: numpy arrays stand in for the device buffers."""
import numpy as np

import needle as ndl
from needle.compiler.host_uploads import HostUploads


def copy_into(device_array, host_array):
    device_array[...] = host_array


def masks(count, shape=(8, 5), keep=0.75):
    """What Dropout draws: ``count`` masks, cast as its upload casts them."""
    return [ndl.init.randb(*shape, p=keep, dtype="float32").realize_cached_data().raw for _ in range(count)]


def test_each_launch_gets_fresh_masks_in_the_order_eager_draws_them():
    uploads = HostUploads(copy_into)
    np.random.seed(3)
    with uploads:
        buffers = [uploads.buffer_for(mask, np.empty) for mask in masks(2)]  # two Dropout layers
        constant = uploads.buffer_for(np.arange(3, dtype=np.float32), np.empty)
    np.random.seed(11)
    expected = [masks(2) for _ in range(3)]  # three eager steps
    np.random.seed(11)
    for step in range(3):
        constant[...] = -1  # the graph may overwrite what it was given
        uploads.before_launch()
        for buffer, mask in zip(buffers, expected[step]):
            assert np.array_equal(buffer, mask)
        assert constant.tolist() == [0.0, 1.0, 2.0], "a constant is uploaded as captured, every launch"
    assert not np.array_equal(expected[0][0], expected[1][0]), "fresh masks"
    assert set(np.unique(expected[0][0])) <= {0.0, 1.0} and buffers[0].dtype == np.float32


def test_the_recorder_is_active_only_inside_the_block():
    uploads = HostUploads(copy_into)
    draw = np.random.rand
    with uploads:
        assert np.random.rand is not draw
    assert np.random.rand is draw
    plain = np.random.rand(2)
    assert type(plain) is np.ndarray and uploads.uploads == [] and uploads.guards == []


def test_inside_the_block_an_upload_to_another_device_gets_a_buffer_and_the_host_keeps_its_own():
    from needle.backend_ndarray import Device

    gpu = Device("stand-in-gpu", np)  # numpy arrays, but not the CPU: its uploads are intercepted
    uploads = HostUploads(copy_into, Device, ndl.cpu())
    original = Device.from_host
    np.random.seed(2)
    with uploads:
        on_gpu = ndl.init.randb(6, p=0.5, device=gpu, dtype="float32").realize_cached_data().raw
        on_cpu = ndl.init.randb(6, p=0.5, dtype="float32").realize_cached_data().raw
    assert Device.from_host is original, "given back"
    assert [buffer for _, buffer in uploads.uploads] == [on_gpu] and on_gpu.dtype == np.float32
    assert on_cpu is not on_gpu and len(uploads.uploads) == 1, "the host's own arrays are not uploads"
    np.random.seed(4)
    expected = (np.random.rand(6) <= 0.5).astype(np.float32)
    np.random.seed(4)
    uploads.before_launch()
    assert np.array_equal(on_gpu, expected)
