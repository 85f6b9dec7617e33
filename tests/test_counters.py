"""Live graph counters, tested exactly: nodes, tensors, bytes and backward calls, and their lifetimes."""
import gc

import numpy as np
import pytest

import needle as ndl
import needle.autograd
from needle import ops


def live_nodes():
    return ndl.autograd.snapshot().live_nodes


def test_lecture_loop_keeps_two_nodes_per_iteration(device, graph_baseline):
    x = ndl.Tensor([1.0], device=device)
    sum_loss = ndl.Tensor([0.0], device=device)
    before = graph_baseline()
    for _ in range(100):
        sum_loss = sum_loss + x * x
    after = ndl.autograd.snapshot()
    assert after.live_nodes - before.live_nodes == 200
    assert after.live_tensors - before.live_tensors == 200  # the first sum_loss leaf is kept as an input
    assert after.nodes_created - before.nodes_created == 200
    assert ndl.autograd.TENSOR_COUNTER == after.live_tensors
    np.testing.assert_allclose(sum_loss.numpy(), [100.0])
    del sum_loss
    assert live_nodes() == before.live_nodes
    assert ndl.autograd.snapshot().live_tensors == before.live_tensors - 1


def test_lecture_loop_with_detach_stays_constant(device, graph_baseline):
    x = ndl.Tensor([1.0], device=device)
    sum_loss = ndl.Tensor([0.0], device=device)
    before = graph_baseline()
    counts = set()
    for _ in range(100):
        sum_loss = (sum_loss + x * x).detach()
        counts.add((live_nodes(), ndl.autograd.TENSOR_COUNTER))
    after = ndl.autograd.snapshot()
    assert counts == {(before.live_nodes, before.live_tensors)}
    assert after.nodes_created - before.nodes_created == 200
    assert after.nodes_freed - before.nodes_freed == 200
    np.testing.assert_allclose(sum_loss.numpy(), [100.0])


def test_counts_return_to_baseline_after_del(device, graph_baseline, lazy_mode):
    before = graph_baseline()
    x = ndl.Tensor(np.ones((3, 4)), device=device)
    w = ndl.Tensor(np.ones((4, 2)), device=device)
    loss = ops.relu(x @ w).sum()
    middle = ndl.autograd.snapshot()
    assert middle.live_tensors - before.live_tensors == 5
    assert middle.live_nodes - before.live_nodes == 3
    del x, w, loss
    after = ndl.autograd.snapshot()
    assert (after.live_tensors, after.live_nodes) == (before.live_tensors, before.live_nodes)
    assert after.bytes_by_device == before.bytes_by_device


def test_fast_backward_retains_no_graph(device, graph_baseline):
    before = graph_baseline()
    x = ndl.Tensor(np.ones((3, 4)), device=device)
    w = ndl.Tensor(np.ones((4, 2)), device=device)
    loss = ops.tanh(x @ w).sum()
    built = ndl.autograd.snapshot()
    loss.backward(create_graph=False)
    after_backward = ndl.autograd.snapshot()
    assert after_backward.live_nodes == built.live_nodes, "backward(create_graph=False) kept graph nodes"
    assert after_backward.live_tensors == built.live_tensors + 2  # x.grad and w.grad, constants
    assert after_backward.backward_calls == built.backward_calls + 1
    del loss
    assert live_nodes() == before.live_nodes, "the forward graph outlived its last reference"
    del x, w
    after = ndl.autograd.snapshot()  # no collection: nothing may be left in reference cycles
    assert (after.live_tensors, after.live_nodes) == (before.live_tensors, before.live_nodes)
    assert after.bytes_by_device == before.bytes_by_device


def test_graph_backward_builds_nodes_that_a_collection_frees(device, graph_baseline):
    before = graph_baseline()
    x = ndl.Tensor(np.ones((3, 4)), device=device)
    loss = ops.tanh(x * x).sum()
    built = ndl.autograd.snapshot()
    loss.backward()
    assert ndl.autograd.snapshot().live_nodes > built.live_nodes, "create_graph=True builds gradient nodes"
    del x, loss
    gc.collect()
    after = ndl.autograd.snapshot()
    assert (after.live_tensors, after.live_nodes) == (before.live_tensors, before.live_nodes)


def test_no_grad_creates_no_nodes(device, graph_baseline):
    x = ndl.Tensor(np.ones(4), device=device)
    before = graph_baseline()
    with ndl.no_grad():
        for _ in range(10):
            x = x * 2 + 1
    after = ndl.autograd.snapshot()
    assert after.nodes_created == before.nodes_created
    assert after.live_tensors == before.live_tensors


def test_bytes_grow_by_exact_nbytes_of_owned_arrays(device, graph_baseline):
    before = graph_baseline().bytes_by_device.get(device.name, 0)

    def grown():
        return ndl.autograd.snapshot().bytes_by_device.get(device.name, 0) - before

    x = ndl.Tensor(np.ones((10, 10), dtype=np.float32), device=device)
    assert grown() == 400
    y = x + x
    assert grown() == 800
    view = y.reshape((100,))
    assert grown() == 800, "a view owns no memory"
    z = ndl.Tensor(np.ones((5, 2)), device=device, dtype="float64")
    assert grown() == 880
    del view, y
    assert grown() == 480
    del x, z
    assert grown() == 0


def test_lazy_values_count_bytes_when_realized(device, graph_baseline):
    saved = needle.autograd.LAZY_MODE
    needle.autograd.LAZY_MODE = True
    try:
        x = ndl.Tensor(np.ones((4, 4), dtype=np.float32), device=device)
        before = graph_baseline().bytes_by_device[device.name]
        y = x * 3
        assert ndl.autograd.snapshot().bytes_by_device[device.name] == before
        y.realize_cached_data()
        assert ndl.autograd.snapshot().bytes_by_device[device.name] == before + 64
        del y
        assert ndl.autograd.snapshot().bytes_by_device[device.name] == before
    finally:
        needle.autograd.LAZY_MODE = saved


def test_data_setter_moves_the_byte_count(device, graph_baseline):
    x = ndl.Tensor(np.ones(8, dtype=np.float32), device=device)
    before = graph_baseline()
    x.data = ndl.Tensor(np.ones(16, dtype=np.float32), device=device)
    after = ndl.autograd.snapshot()
    # x now owns 64 bytes instead of 32; the temporary Tensor that held the new array is gone.
    assert after.bytes_by_device[device.name] - before.bytes_by_device[device.name] == 32


def test_tensors_created_and_backward_calls(device):
    before = ndl.autograd.snapshot()
    x = ndl.Tensor([1.0, 2.0], device=device)
    y = (x * x).sum()
    forward = ndl.autograd.snapshot()
    assert forward.tensors_created - before.tensors_created == 3
    assert forward.nodes_created - before.nodes_created == 2
    y.backward(create_graph=False)
    after_fast = ndl.autograd.snapshot()
    assert after_fast.tensors_created - forward.tensors_created == 1  # x.grad only
    assert after_fast.nodes_created == forward.nodes_created
    y.backward()
    after = ndl.autograd.snapshot()
    assert after.backward_calls - before.backward_calls == 2
    assert after.nodes_created > after_fast.nodes_created


def test_snapshot_is_a_frozen_copy():
    snap = ndl.autograd.snapshot()
    assert ndl.graph_snapshot is ndl.autograd.snapshot
    with pytest.raises(AttributeError):
        snap.live_nodes = 0
    snap.bytes_by_device["cpu"] = -1
    assert ndl.autograd.snapshot().bytes_by_device["cpu"] != -1
    assert snap.live_bytes == sum(snap.bytes_by_device.values())
