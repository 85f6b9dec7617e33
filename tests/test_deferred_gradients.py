"""The course backward()'s gradients of constants are deferred: computed when read, with backward-time values."""
import numpy as np

import needle as ndl
from needle import deferred, nn, ops


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(5, 3)), rng.normal(size=(3, 4)), rng.normal(size=(4, 2))


def test_batch_and_detached_weight_grads_equal_the_eager_course_values(device):
    batch_data, w_data, frozen_data = _data()
    batch = ndl.Tensor(batch_data, device=device, dtype="float64", requires_grad=False)
    w = ndl.Tensor(w_data, device=device, dtype="float64")
    frozen = ndl.Tensor(frozen_data, device=device, dtype="float64").detach()
    hidden = ops.relu(batch @ w)
    (hidden @ frozen).sum().backward()
    assert isinstance(batch.grad, deferred.DeferredGradient) and batch.grad.is_pending()
    assert isinstance(frozen.grad, deferred.DeferredGradient) and frozen.grad.is_pending()
    # shape and dtype are known without computing anything
    assert batch.grad.shape == (5, 3) and batch.grad.dtype == np.float64 and batch.grad.is_pending()
    mask = (batch_data @ w_data) > 0
    seed = (np.ones((5, 2)) @ frozen_data.T) * mask
    np.testing.assert_allclose(batch.grad.numpy(), seed @ w_data.T, rtol=1e-12)
    np.testing.assert_allclose(frozen.grad.numpy(), np.maximum(batch_data @ w_data, 0).T @ np.ones((5, 2)), rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), batch_data.T @ seed, rtol=1e-12)
    assert not batch.grad.is_pending() and batch.grad.op is None and not batch.grad.requires_grad


def test_a_step_that_never_reads_them_computes_none(device):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(3, 4, device=device), nn.ReLU(), nn.Linear(4, 2, device=device))
    opt = ndl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    batch = ndl.Tensor(np.random.default_rng(1).normal(size=(6, 3)), device=device, requires_grad=False)
    labels = ndl.Tensor(np.array([0, 1, 0, 1, 1, 0]), device=device, dtype="int64")
    before = deferred.realized_count()
    for _ in range(3):
        opt.reset_grad()
        nn.SoftmaxLoss()(model(batch), labels).backward()
        opt.step()
    assert deferred.realized_count() == before, "a gradient nobody read was computed"
    assert batch.grad.is_pending()
    batch.grad.numpy()
    assert deferred.realized_count() == before + 1


def test_a_deferred_gradient_reads_the_weights_as_they_were_at_backward(device):
    """An optimizer updating the weights in place afterwards does not change the batch's .grad."""
    batch_data, w_data, _ = _data(2)
    batch = ndl.Tensor(batch_data, device=device, requires_grad=False)
    w = nn.Parameter(ndl.Tensor(w_data, device=device))
    (batch @ w).sum().backward()
    expected = np.ones((5, 4)) @ w.numpy().T  # w at backward time
    ndl.optim.SGD([w], lr=1.0).step()
    assert not np.allclose(w.numpy(), w_data.astype(np.float32)), "the step must have moved w"
    assert batch.grad.is_pending()
    np.testing.assert_allclose(batch.grad.numpy(), expected, rtol=1e-6)


def test_a_pending_gradient_keeps_no_graph_node_alive(device, graph_baseline):
    batch = ndl.Tensor(np.ones((4, 3)), device=device, requires_grad=False)
    before = graph_baseline()
    w = ndl.Tensor(np.ones((3, 2)), device=device)
    layer = nn.Linear(2, 2, device=device)
    loss = layer(ops.relu(batch @ w)).sum()
    loss.backward()
    layer_weight = layer.weight.numpy().astype(np.float64)
    del w, loss, layer
    after = graph_baseline()
    assert after.live_nodes == before.live_nodes
    assert batch.grad.is_pending()
    hidden_grad = np.ones((4, 2)) @ layer_weight.T  # relu(batch @ w) = 3 > 0 everywhere
    np.testing.assert_allclose(batch.grad.numpy(), hidden_grad @ np.ones((3, 2)).T, rtol=1e-5)


def test_a_batched_product_with_a_broadcast_constant_sums_its_deferred_gradient(device):
    rng = np.random.default_rng(3)
    left_data, right_data = rng.normal(size=(2, 3, 4)), rng.normal(size=(4, 5))
    left = ndl.Tensor(left_data, device=device, dtype="float64")
    right = ndl.Tensor(right_data, device=device, dtype="float64", requires_grad=False)
    (left @ right).sum().backward()
    assert right.grad.is_pending() and right.grad.shape == (4, 5)
    expected = sum(left_data[i].T @ np.ones((3, 5)) for i in range(2))
    np.testing.assert_allclose(right.grad.numpy(), expected, rtol=1e-12)


def test_the_fast_path_defers_nothing_and_gives_constants_no_grad(device):
    batch = ndl.Tensor(np.ones((2, 3)), device=device, requires_grad=False)
    w = ndl.Tensor(np.ones((3, 1)), device=device)
    (batch @ w).sum().backward(create_graph=False)
    assert batch.grad is None and not isinstance(w.grad, deferred.DeferredGradient)


def test_a_weight_that_is_a_view_of_a_flat_buffer_is_copied_for_its_pending_gradient(device):
    """Parameters tiled into one flat buffer (as ndl.compile makes them) are views: updated in place."""
    from needle.compiler.flat_buffers import flatten_parameters

    rng = np.random.default_rng(7)
    layer = nn.Linear(3, 4, device=device)
    opt = ndl.optim.SGD(layer.parameters(), lr=1.0, momentum=0.5)
    flatten_parameters([opt])
    weight = layer.weight.realize_cached_data()
    batch = ndl.Tensor(rng.normal(size=(2, 3)), device=device, requires_grad=False)
    layer(batch).sum().backward()
    expected = np.ones((2, 4)) @ layer.weight.numpy().T
    opt.step()
    assert layer.weight.realize_cached_data() is weight, "the update is in place"
    assert not np.allclose(layer.weight.numpy() @ np.ones((4, 2)), expected.T)
    np.testing.assert_allclose(batch.grad.numpy(), expected, rtol=1e-6)


def test_two_pending_gradients_of_one_weight_each_get_a_copy(device):
    rng = np.random.default_rng(6)
    w = nn.Parameter(ndl.Tensor(rng.normal(size=(3, 4)), device=device))
    a, b = (ndl.Tensor(rng.normal(size=(2, 3)), device=device, requires_grad=False) for _ in range(2))
    ((a @ w).sum() + ((b @ w) * 2).sum()).backward()
    w_then = w.numpy().copy()
    ndl.optim.SGD([w], lr=1.0).step()
    assert a.grad._copies[0] is not b.grad._copies[0]
    np.testing.assert_allclose(a.grad.numpy(), np.ones((2, 4)) @ w_then.T, rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), 2 * np.ones((2, 4)) @ w_then.T, rtol=1e-6)


def test_each_step_copies_the_weight_into_the_spare_the_last_step_gave_back(device):
    """The copy path: the caller keeps the weight's numpy array, so its update stays in place."""
    from needle import spare_copies

    spare_copies.clear()
    rng = np.random.default_rng(4)
    w = nn.Parameter(ndl.Tensor(rng.normal(size=(3, 4)), device=device))
    opt = ndl.optim.SGD([w], lr=0.5)
    kept_view = w.numpy()  # what the caller holds must see the update: no hand-over
    buffers = []
    for step in range(3):
        batch = ndl.Tensor(rng.normal(size=(5, 3)), device=device, requires_grad=False)
        opt.reset_grad()
        (batch @ w).sum().backward()
        expected = np.ones((5, 4)) @ w.numpy().T  # w before this step's update
        opt.step()
        (copy,) = batch.grad._copies
        buffers.append(id(copy.raw))
        del copy
        if step < 2:
            del batch  # its gradient (still pending) goes, and gives its copy back
    assert buffers[1] == buffers[0] and buffers[2] == buffers[0], "the spare was not reused"
    np.testing.assert_allclose(batch.grad.numpy(), expected, rtol=1e-6)  # the values of its own step
    if device.name == "cpu":
        assert kept_view is w.numpy(), "the update was in place"
    before = ndl.autograd.snapshot().live_bytes
    spare_copies.clear()
    assert before - ndl.autograd.snapshot().live_bytes == w.realize_cached_data().raw.nbytes, "the waiting spare is counted"



def test_sole_readers_names_an_array_read_once_as_itself():
    from needle.backend_ndarray import NDArray

    weight, other = NDArray(np.ones((3, 2), "float32")), NDArray(np.ones((4, 3), "float32"))
    view = NDArray.wrap(weight.raw[:, :1], weight.device)
    targets = {id(weight.raw): 0, id(other.raw): 1}
    once = deferred.DeferredGradient.of(lambda a, b: a @ b, (other, weight), (4, 2), "float32")
    assert deferred.sole_readers(targets) == {id(weight.raw): (once, 1), id(other.raw): (once, 0)}
    twice = deferred.DeferredGradient.of(lambda a: a, (weight,), (3, 2), "float32")
    assert deferred.sole_readers(targets) == {id(other.raw): (once, 0)}, "read by two gradients"
    del twice
    through_view = deferred.DeferredGradient.of(lambda a: a, (view,), (3, 1), "float32")
    assert deferred.sole_readers(targets) == {id(other.raw): (once, 0)}, "read through a view too"
    del through_view
    assert deferred.sole_readers(targets) == {id(weight.raw): (once, 1), id(other.raw): (once, 0)}
    once.numpy()  # computed: it reads nothing any more
    assert deferred.sole_readers(targets) == {}
