"""``split`` then reading every item: the backward pass does work linear in the number of items.

Each ``tuple_get_item`` hands back its item's gradient only, and the tuple's gradient is built
once; the figures counted here (values made, array additions) would grow as n^2 if each item
gave a dense tuple and the tuples were summed.
"""
import numpy as np
import pytest

import needle as ndl
from needle import ops
from needle.backend_ndarray import NDArray

BOTH_PATHS = pytest.mark.parametrize("create_graph", [True, False], ids=["course", "fast"])


def read_every_item(steps, device, create_graph, counter):
    """Split a (steps, 3) tensor, use every item once and item 0 twice more, run backward;
    return (values made, array additions) during backward(), and the input."""
    x = ndl.Tensor(np.arange(steps * 3, dtype=np.float64).reshape(steps, 3) / 10, device=device, dtype="float64")
    pieces = ops.split(x, 0)
    total = pieces[0]
    for index in range(1, steps):
        total = total + pieces[index]
    loss = ops.summation(total) + ops.summation(pieces[0] * pieces[0])
    before_values, before_adds = ndl.autograd.snapshot().tensors_created, counter["adds"]
    loss.backward(create_graph=create_graph)
    return ndl.autograd.snapshot().tensors_created - before_values, counter["adds"] - before_adds, x


@pytest.fixture
def counted_additions(monkeypatch):
    counter = {"adds": 0}
    add = NDArray.__add__

    def counting_add(self, other):
        counter["adds"] += 1
        return add(self, other)

    monkeypatch.setattr(NDArray, "__add__", counting_add)
    return counter


@BOTH_PATHS
def test_split_backward_work_grows_linearly_with_the_items(create_graph, device, counted_additions):
    work = {n: read_every_item(n, device, create_graph, counted_additions)[:2] for n in (8, 16, 32, 64)}
    for figure in (0, 1):  # values made, array additions
        steps = [work[n][figure] for n in (8, 16, 32, 64)]
        growth = [later - earlier for earlier, later in zip(steps, steps[1:])]
        # linear: doubling n from 8 to 16 adds d, from 16 to 32 adds 2d, from 32 to 64 adds 4d
        assert growth[1] == 2 * growth[0] and growth[2] == 4 * growth[0], (figure, steps)
        assert steps[-1] <= 40 * 64, (figure, steps)


@BOTH_PATHS
def test_split_backward_sums_each_items_gradients(create_graph, device, counted_additions):
    _, _, x = read_every_item(5, device, create_graph, counted_additions)
    expected = np.ones((5, 3))
    expected[0] += 2 * x.numpy()[0]  # item 0 is read three times: in total, and twice in its square
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)
    assert x.grad.dtype == np.float64


def test_split_backward_leaves_zeros_where_no_item_was_read_and_second_order_works(device):
    x = ndl.Tensor(np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), device=device, dtype="float64")
    pieces = ops.split(x, 0)
    y = ops.summation(pieces[1] * pieces[1] * pieces[1]) + ops.summation(pieces[-1])
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0], [27, 48], [1, 1]])
    grad = x.grad
    ops.summation(grad).backward()  # d/dx of sum(3 x1^2 + 1): 6 x1 on row 1, nothing elsewhere
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0], [18, 24], [0, 0]])
