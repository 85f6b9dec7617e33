"""Live bytes per buffer: each buffer counted once while anything needle keeps refers to it."""
import gc
import types

import numpy as np
import pytest

import needle as ndl
from needle import live_buffers, ops
from needle.backend_ndarray import NDArray
from needle.ops.ops_mathematic import ReLUBackward


@pytest.fixture
def grown(graph_baseline):
    """Bytes held on the CPU now, less those held when the test started."""
    before = graph_baseline().bytes_by_device["cpu"]
    return lambda: ndl.autograd.snapshot().bytes_by_device["cpu"] - before


def test_a_tuple_item_shares_the_tuple_buffer(grown):
    a, b = ndl.Tensor(np.ones(8, dtype="float32")), ndl.Tensor(np.ones(4, dtype="float32"))
    pair = ops.make_tuple(a, b)
    first = pair[0]
    assert first.realize_cached_data() is pair.realize_cached_data()[0]
    assert grown() == 48
    del pair, a, b
    assert grown() == 32, "the item keeps its buffer after the tuple goes"
    del first
    assert grown() == 0


def test_detach_shares_its_buffer(grown):
    x = ndl.Tensor(np.ones(10, dtype="float32"), requires_grad=True)
    copies = [x.detach() for _ in range(3)]
    assert grown() == 40
    del x
    assert grown() == 40
    del copies
    assert grown() == 0


def test_a_reshape_of_a_temporary_counts_its_buffer(grown):
    x = ndl.Tensor(np.ones((4, 5, 5, 3), dtype="float32"), requires_grad=False)
    weight = ndl.Tensor(np.ones((3, 3, 3, 2), dtype="float32"), requires_grad=False)
    out = ops.conv(x, weight)  # NOTE: the output is a view of the matrix product, which nothing else keeps
    product = out.realize_cached_data().raw.base
    assert product is not None and product.nbytes >= 4 * 3 * 3 * 2 * 4
    assert grown() == 4 * 5 * 5 * 3 * 4 + 3 * 3 * 3 * 2 * 4 + product.nbytes
    del x, weight
    assert grown() == product.nbytes


def test_a_reshape_that_copies_counts_the_copy(grown):
    original = ndl.Tensor(np.ones((3, 4), dtype="float32"), requires_grad=False)
    flat = ops.reshape(ops.transpose(original), (12,))
    assert np.shares_memory(flat.numpy(), original.numpy()) is False
    del original
    assert grown() == 48


def test_a_view_of_a_freed_batch_keeps_counting_the_batch(grown):
    batch = np.ones((2, 3, 4, 4), dtype="float32")
    nhwc = ndl.Tensor(batch, requires_grad=False).transpose((1, 2)).transpose((2, 3))
    del batch
    gc.collect()
    assert nhwc.realize_cached_data().raw.base is not None
    assert grown() == 2 * 3 * 4 * 4 * 4


def test_live_bytes_are_the_distinct_buffers_of_the_live_values(grown):
    # Under the default backward every node gets a detached .grad, many of them views, and one
    # gradient array can go to several nodes (the inputs of an addition).
    # NOTE: type(), not isinstance: isinstance reads __class__, which some modules' objects warn on
    before = {id(value): value for value in gc.get_objects() if issubclass(type(value), ndl.autograd.Value)}  # kept: ids stay unique
    x = ndl.Tensor(np.ones((6, 8), dtype="float32"), requires_grad=True)
    w = ndl.Tensor(np.ones((8, 4), dtype="float32"), requires_grad=True)
    hidden = ops.relu(x @ w).reshape((4, 6)).transpose()
    loss = ((hidden + 1) + hidden).sum()
    loss.backward()
    new = [v for v in gc.get_objects() if issubclass(type(v), ndl.autograd.Value) and id(v) not in before]
    assert grown() == ndl.autograd.held_bytes(new)
    naive = sum(v.realize_cached_data().raw.nbytes for v in new)
    assert grown() < naive, "shared buffers must count once"
    del new, x, w, hidden, loss, before
    gc.collect()  # NOTE: a leaf's .grad graph refers back to the leaves: a cycle
    assert grown() == 0


@pytest.mark.parametrize("create_graph", [True, False])
def test_lstm_saved_activations_are_counted_and_freed_with_the_node(grown, create_graph):
    steps, batch, inputs, hidden = 5, 3, 4, 6
    X = ndl.Tensor(np.ones((steps, batch, inputs), dtype="float32"), requires_grad=True)
    zeros = ndl.Tensor(np.zeros((batch, hidden), dtype="float32"))
    w_ih = ndl.Tensor(np.full((inputs, 4 * hidden), 0.1, dtype="float32"), requires_grad=True)
    w_hh = ndl.Tensor(np.full((hidden, 4 * hidden), 0.1, dtype="float32"), requires_grad=True)
    start = grown()
    result = ops.lstm_layer(X, zeros, zeros, w_ih, w_hh)
    output_bytes = (steps + 2) * batch * hidden * 4  # output, h_n, c_n
    saved_bytes = steps * batch * (4 + 1 + 1) * hidden * 4  # activated gates, cells, tanh(cells)
    assert grown() - start == output_bytes + saved_bytes
    assert len(result.op.saved_arrays) == 4 and all(isinstance(a, NDArray) for a in result.op.saved_arrays)
    del result
    assert grown() == start


def test_cross_entropy_keeps_its_exponentials_until_the_first_backward(grown):
    logits = ndl.Tensor(np.ones((8, 5), dtype="float32"), requires_grad=True)
    labels = ndl.Tensor(np.arange(8) % 5, dtype="int64")
    start = grown()
    loss = ops.softmax_cross_entropy(logits, labels)
    op = loss.op
    kept = grown() - start
    assert kept >= 8 * 5 * 4 + 4, "the exponentials (and row sums) are counted"
    loss.backward(create_graph=False)
    assert op.saved_arrays == ()
    assert grown() - start == 4 + 8 * 5 * 4  # the loss and logits.grad, made from the saved exponentials
    del loss, op


def test_embedding_indices_are_saved_and_counted(grown):
    weight = ndl.Tensor(np.ones((10, 3), dtype="float32"), requires_grad=True)
    start = grown()
    rows = ops.embedding(ndl.Tensor(np.arange(6).reshape(2, 3), dtype="int64"), weight)
    assert grown() - start == 2 * 3 * 3 * 4 + 6 * 8  # the rows, and the indices on the op
    del rows
    assert grown() == start


def test_save_for_backward_rejects_a_raw_array_and_keeps_what_was_saved(grown):
    op = ndl.autograd.Op()
    kept = NDArray(np.ones(4, dtype="float32"))
    op.save_for_backward(kept)
    with pytest.raises(TypeError, match=r"save_for_backward: argument 1 is ndarray, not an NDArray.*NDArray.wrap"):
        op.save_for_backward(kept, np.ones(3))
    assert op.saved_arrays == (kept,)
    assert grown() == 16
    del kept
    op.release_saved()
    assert grown() == 0


def test_owned_bytes_counts_a_view_s_whole_buffer_and_the_op_s_saved_arrays():
    x = ndl.Tensor(np.ones(6, dtype="float32"))
    assert ndl.autograd.owned_bytes(x.reshape((2, 3))) == 24
    relu_grad = ReLUBackward(x.realize_cached_data())(ndl.Tensor(np.ones(6, dtype="float32"), requires_grad=True))
    assert ndl.autograd.owned_bytes(relu_grad) == 24 + 24
    assert ndl.autograd.held_bytes([x, relu_grad]) == 48


def test_a_cupy_like_block_counts_once_for_all_its_views():
    # CuPy views (as_strided ones too) share the memory block ``data.mem``; no GPU needed here.
    device = types.SimpleNamespace(name="fake-gpu")
    block = object()
    owner = types.SimpleNamespace(nbytes=512, base=None, data=types.SimpleNamespace(mem=block))
    view = types.SimpleNamespace(nbytes=64, base=None, data=types.SimpleNamespace(mem=block))
    tokens = [live_buffers.hold(types.SimpleNamespace(raw=raw, device=device)) for raw in (owner, view)]
    assert live_buffers.BYTES_BY_DEVICE["fake-gpu"] == 512
    live_buffers.release(tuple(tokens))
    assert live_buffers.BYTES_BY_DEVICE["fake-gpu"] == 0
    del live_buffers.BYTES_BY_DEVICE["fake-gpu"]


@pytest.fixture
def fake_gpu():
    """A device name no real device has; its counter is removed after the test."""
    yield types.SimpleNamespace(name="fake-gpu-2")
    assert live_buffers.BYTES_BY_DEVICE.pop("fake-gpu-2", 0) == 0, "a test left bytes held"


def on(device, raw):
    return types.SimpleNamespace(raw=raw, device=device)


def cupy_like(nbytes, block, base=None):
    return types.SimpleNamespace(nbytes=nbytes, base=base, data=None if block is None else types.SimpleNamespace(mem=block))


def test_two_cupy_like_blocks_count_apart_and_a_view_held_first_counts_its_owner(fake_gpu):
    first_block, second_block = object(), object()
    owner = cupy_like(512, first_block)
    view = cupy_like(64, first_block, base=owner)  # as CuPy: a view's base is the array that owns the block
    other = cupy_like(256, second_block)
    buffers = live_buffers.held_buffer_count()
    tokens = [live_buffers.hold(on(fake_gpu, raw)) for raw in (view, other, owner)]
    assert live_buffers.BYTES_BY_DEVICE["fake-gpu-2"] == 512 + 256
    assert live_buffers.held_buffer_count() == buffers + 2
    assert tokens[0] is tokens[2] and tokens[0][live_buffers.HOLDERS] == 2
    live_buffers.release(tokens[1])
    assert live_buffers.BYTES_BY_DEVICE["fake-gpu-2"] == 512
    live_buffers.release((tokens[0], tokens[2]))
    assert live_buffers.BYTES_BY_DEVICE["fake-gpu-2"] == 0 and live_buffers.held_buffer_count() == buffers


def test_an_array_without_a_memory_block_is_counted_through_its_base(fake_gpu):
    owner = cupy_like(100, None)
    view = cupy_like(10, None, base=owner)
    lone = cupy_like(30, None)
    tokens = [live_buffers.hold(on(fake_gpu, raw)) for raw in (view, owner, lone)]
    assert tokens[0] is tokens[1]
    assert live_buffers.BYTES_BY_DEVICE["fake-gpu-2"] == 130
    live_buffers.release(tuple(tokens))


class Subclass(np.ndarray):
    """A numpy subclass (as ``ndl.compile``'s capture arrays are): counted as numpy, by its owner."""


def test_a_view_through_as_strided_counts_the_array_at_the_end_of_its_base_chain():
    x = np.zeros(8, dtype="float32")
    strided = np.lib.stride_tricks.as_strided(x, shape=(4,), strides=(8,))
    view = strided[1:]  # its base is an array whose own base is as_strided's helper object
    assert view.base is strided and strided.base is not None
    before, buffers = live_buffers.BYTES_BY_DEVICE["cpu"], live_buffers.held_buffer_count()
    tokens = [live_buffers.hold(NDArray(raw)) for raw in (view, x, strided)]
    assert tokens[0] is tokens[1] is tokens[2]
    assert live_buffers.BYTES_BY_DEVICE["cpu"] - before == 32
    assert live_buffers.held_buffer_count() == buffers + 1
    live_buffers.release(tuple(tokens))
    assert live_buffers.BYTES_BY_DEVICE["cpu"] == before


def test_numpy_subclass_arrays_count_the_buffer_they_view_once():
    x = np.zeros(8, dtype="float32")
    owned = Subclass((6,), dtype="float32")  # a subclass array that owns its memory
    strided = np.lib.stride_tricks.as_strided(owned, shape=(2,), strides=(8,), subok=True)
    assert strided.__class__ is Subclass and strided.base is not owned
    before, buffers = live_buffers.BYTES_BY_DEVICE["cpu"], live_buffers.held_buffer_count()
    arrays = [NDArray(x[1:3].view(Subclass)), NDArray(x), NDArray(strided), NDArray(owned[2:])]
    assert arrays[0].raw.__class__ is Subclass
    tokens = [live_buffers.hold(array) for array in arrays]
    assert tokens[0] is tokens[1] and tokens[2] is tokens[3]
    assert live_buffers.BYTES_BY_DEVICE["cpu"] - before == 32 + 24
    assert live_buffers.held_buffer_count() == buffers + 2
    live_buffers.release(tuple(tokens))
    assert live_buffers.BYTES_BY_DEVICE["cpu"] == before


def test_hold_all_holds_the_arrays_of_nested_tuples_and_skips_what_is_no_array():
    a, b = NDArray(np.zeros(2, dtype="float32")), NDArray(np.zeros(3, dtype="float32"))
    before = live_buffers.BYTES_BY_DEVICE["cpu"]
    tokens = live_buffers.hold_all((a, (b, None), 7))
    assert live_buffers.BYTES_BY_DEVICE["cpu"] - before == 20
    assert isinstance(tokens, tuple) and len(tokens) == 2 and isinstance(tokens[1], tuple)
    assert live_buffers.hold_all((None, (5,))) is None and live_buffers.hold_all(None) is None
    live_buffers.release(tokens)
    assert live_buffers.BYTES_BY_DEVICE["cpu"] == before


def test_tallied_bytes_count_each_buffer_once_and_exclusively_only_when_every_holder_is_tallied():
    x, y = NDArray(np.zeros(4, dtype="float32")), NDArray(np.zeros(2, dtype="float64"))
    x_whole, x_view, x_other_view = live_buffers.hold(x), live_buffers.hold(x[1:3]), live_buffers.hold(x[::2])
    y_token = live_buffers.hold(y)
    try:
        counts = {}
        live_buffers.tally(((x_whole, (y_token,)), x_view), counts)  # nested, a buffer seen twice
        live_buffers.tally(None, counts)
        assert live_buffers.tallied_bytes(counts) == 16 + 16
        assert live_buffers.tallied_bytes(counts, exclusive=True) == 16, "x's buffer has a third holder"
        live_buffers.tally(x_other_view, counts)
        assert live_buffers.tallied_bytes(counts, exclusive=True) == 32, "now all three are tallied"
        once = {}
        live_buffers.tally(x_view, once)
        assert live_buffers.tallied_bytes(once) == 16 and live_buffers.tallied_bytes(once, exclusive=True) == 0
        thrice = {}
        live_buffers.tally((x_view, x_view, x_other_view), thrice)  # seen 3 times: as many as its holders
        assert live_buffers.tallied_bytes(thrice, exclusive=True) == 16
        twice = {}
        live_buffers.tally((x_view, x_other_view), twice)
        assert live_buffers.tallied_bytes(twice, exclusive=True) == 0, "seen twice, held three times"
    finally:
        live_buffers.release((x_whole, x_view, x_other_view, y_token))


def test_an_array_with_neither_a_memory_block_nor_a_base_is_its_own_buffer(fake_gpu):
    bare = types.SimpleNamespace(nbytes=48)  # only what every array has
    token = live_buffers.hold(on(fake_gpu, bare))
    assert live_buffers.BYTES_BY_DEVICE["fake-gpu-2"] == 48 and token[live_buffers.OWNER] is bare
    live_buffers.release(token)


def test_a_view_of_an_array_over_a_python_buffer_counts_that_array():
    memory = bytearray(16)
    over = np.frombuffer(memory, dtype="float32")  # its base is a memoryview, which has no .base
    view = over[1:]
    assert view.base is over and isinstance(over.base, memoryview)
    before = live_buffers.BYTES_BY_DEVICE["cpu"]
    tokens = (live_buffers.hold(NDArray(view)), live_buffers.hold(NDArray(over)))
    assert tokens[0] is tokens[1] and live_buffers.BYTES_BY_DEVICE["cpu"] - before == 16
    live_buffers.release(tokens)
    assert live_buffers.BYTES_BY_DEVICE["cpu"] == before
