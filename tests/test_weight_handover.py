"""An update written out of place for a weight the batch's deferred gradient reads (needle.weight_handover).

It must be invisible: the same parameters, optimizer state and gradients, bit for bit, as the
update in place with a copy for the gradient; and it must not happen where someone could see the
difference (a kept numpy array, a detached tensor sharing the array).
"""
import numpy as np
import pytest

import needle as ndl
from needle import autograd, nn, spare_copies, weight_handover

OPTIMIZERS = {
    "sgd": lambda params: ndl.optim.SGD(params, lr=0.1),
    "sgd-weight-decay": lambda params: ndl.optim.SGD(params, lr=0.1, weight_decay=0.01),
    "momentum": lambda params: ndl.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01),
    "adam": lambda params: ndl.optim.Adam(params, lr=0.01, weight_decay=0.01),
}


def _train(device, make_optimizer, steps=5, seed=0):
    """A course loop; per step the batch's gradient, read after the step, and whether the first
    layer's weight was handed over. Returns (records, parameters, optimizer state)."""
    ndl.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = nn.Sequential(nn.Linear(6, 5, device=device), nn.ReLU(), nn.Linear(5, 3, device=device))
    opt = make_optimizer(model.parameters())
    weight = model.modules[0].weight
    records = []
    for _ in range(steps):
        batch = ndl.Tensor(rng.normal(size=(4, 6)), device=device, requires_grad=False)
        labels = ndl.Tensor(rng.integers(0, 3, 4), device=device, requires_grad=False)
        opt.reset_grad()
        nn.SoftmaxLoss()(model(batch), labels).backward()
        before = id(weight.realize_cached_data().raw)  # an id: holding the array would prevent the hand-over
        opt.step()
        handed = bool(batch.grad._copies) and id(batch.grad._copies[0].raw) == before
        records.append((batch.grad.numpy().tobytes(), handed))
    state = opt.state_dict()
    return records, [p.numpy().tobytes() for p in model.parameters()], state


def _without_handover(monkeypatch, function):
    with monkeypatch.context() as patch:
        patch.setattr(weight_handover, "hand_over", lambda found: {})
        return function()


def _same_state(first, second):
    assert first.keys() == second.keys()
    for key in first:
        a, b = first[key], second[key]
        if isinstance(a, dict):
            _same_state(a, b)
        elif isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), key
        else:
            assert a == b, key


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_a_handed_over_update_is_the_update_in_place_bit_for_bit(device, optimizer, monkeypatch):
    make = OPTIMIZERS[optimizer]
    records, params, state = _train(device, make)
    records_in_place, params_in_place, state_in_place = _without_handover(monkeypatch, lambda: _train(device, make))
    assert [grad for grad, _ in records] == [grad for grad, _ in records_in_place]
    assert params == params_in_place
    _same_state(state, state_in_place)
    handed = [h for _, h in records]
    assert not any(h for _, h in records_in_place)
    if device.name == "cpu" and weight_handover_available():
        assert all(handed), "every step of a plain course loop hands the weight over"
    else:
        assert not any(handed), "only the CPU's fused updates write out of place"


def weight_handover_available():
    return ndl.cpu().kernels.updates_out_of_place


def test_the_batch_gradient_reads_the_weights_of_its_own_backward(device):
    rng = np.random.default_rng(1)
    w = nn.Parameter(ndl.Tensor(rng.normal(size=(3, 4)), device=device))
    opt = ndl.optim.SGD([w], lr=1.0, momentum=0.5)
    for _ in range(3):
        batch = ndl.Tensor(rng.normal(size=(2, 3)), device=device, requires_grad=False)
        opt.reset_grad()
        (batch @ w).sum().backward()
        expected = np.ones((2, 4)) @ w.numpy().T
        opt.step()
        assert not np.allclose(np.ones((2, 4)) @ w.numpy().T, expected), "the step must have moved w"
        np.testing.assert_allclose(batch.grad.numpy(), expected, rtol=1e-6)


def _one_step(device, keep):
    """A step of a one-weight model; ``keep(w)`` returns what the caller holds across it."""
    rng = np.random.default_rng(2)
    w = nn.Parameter(ndl.Tensor(rng.normal(size=(3, 4)), device=device))
    opt = ndl.optim.SGD([w], lr=1.0)
    batch = ndl.Tensor(rng.normal(size=(2, 3)), device=device, requires_grad=False)
    (batch @ w).sum().backward()
    held = keep(w)
    before = id(w.realize_cached_data().raw)  # an id: holding the array would prevent the hand-over
    expected_w = w.numpy() - w.grad.numpy()
    expected_grad = np.ones((2, 4)) @ w.numpy().T
    opt.step()
    np.testing.assert_allclose(w.numpy(), expected_w, rtol=1e-6)
    np.testing.assert_allclose(batch.grad.numpy(), expected_grad, rtol=1e-6)
    return w, held, id(w.realize_cached_data().raw) == before


def test_nothing_kept_lets_the_weight_be_handed_over(device):
    _, _, in_place = _one_step(device, lambda w: None)
    assert in_place is not (device.name == "cpu" and weight_handover_available())


def test_a_kept_numpy_array_of_the_weight_sees_the_update(device):
    w, kept, in_place = _one_step(device, lambda w: w.numpy())
    assert in_place
    if device.name == "cpu":
        np.testing.assert_array_equal(kept, w.numpy())


def test_a_detached_tensor_sharing_the_weight_sees_the_update(device):
    w, detached, in_place = _one_step(device, lambda w: w.detach())
    assert in_place
    np.testing.assert_array_equal(detached.numpy(), w.numpy())


def test_a_failed_step_hands_nothing_over(device):
    rng = np.random.default_rng(3)
    w = nn.Parameter(ndl.Tensor(rng.normal(size=(3, 4)), device=device))
    other = nn.Parameter(ndl.Tensor(rng.normal(size=(2,)), device=device))
    opt = ndl.optim.SGD([w, other], lr=1.0)
    batch = ndl.Tensor(rng.normal(size=(2, 3)), device=device, requires_grad=False)
    (batch @ w).sum().backward()
    other.grad = ndl.Tensor(np.ones(3), device=device)  # the wrong shape: the step refuses
    before, values = id(w.realize_cached_data().raw), w.numpy().copy()
    with pytest.raises(ValueError, match="gradients must have their parameter's shape"):
        opt.step()
    assert id(w.realize_cached_data().raw) == before and batch.grad.is_pending() and batch.grad._copies == ()
    np.testing.assert_array_equal(w.numpy(), values)


def test_live_bytes_follow_the_buffers_across_handovers():
    spare_copies.clear()
    before = autograd.snapshot().live_bytes
    records, _, _ = _train(ndl.cpu(), OPTIMIZERS["momentum"], steps=4)
    if weight_handover_available():
        assert all(handed for _, handed in records)
    spare_copies.clear()
    assert autograd.snapshot().live_bytes == before, "a buffer handed over was counted twice, or lost"


def test_a_parameter_holds_the_bytes_of_its_new_buffer():
    from needle import live_buffers

    rng = np.random.default_rng(5)
    w = nn.Parameter(ndl.Tensor(rng.normal(size=(30, 40))))
    opt = ndl.optim.SGD([w], lr=0.1)
    batch = ndl.Tensor(rng.normal(size=(2, 30)), requires_grad=False)
    (batch @ w).sum().backward()
    opt.step()
    raw = w.realize_cached_data().raw
    assert live_buffers._HELD[id(raw)][live_buffers.OWNER] is raw
    if batch.grad._copies:
        old = batch.grad._copies[0].raw
        assert live_buffers._HELD[id(old)][live_buffers.OWNER] is old  # the gradient holds the old one


def test_a_step_that_fails_after_the_hand_over_leaves_the_weight_as_it_was(monkeypatch):
    rng = np.random.default_rng(6)
    w = nn.Parameter(ndl.Tensor(rng.normal(size=(3, 4))))
    opt = ndl.optim.SGD([w], lr=1.0, momentum=0.5)
    batch = ndl.Tensor(rng.normal(size=(2, 3)), requires_grad=False)
    (batch @ w).sum().backward()
    values, expected_grad = w.numpy().copy(), np.ones((2, 4)) @ w.numpy().T
    handed = []
    original = weight_handover.hand_over
    monkeypatch.setattr(weight_handover, "hand_over", lambda found: handed.append(1) or original(found))

    def broken(*args, **kwargs):
        raise MemoryError("no memory for the update")

    monkeypatch.setattr(type(ndl.cpu().kernels), "momentum_steps", broken)
    with pytest.raises(MemoryError):
        opt.step()
    assert handed
    if weight_handover_available():
        assert batch.grad._copies, "the weight was handed over before the update failed"
    np.testing.assert_array_equal(w.numpy(), values)
    np.testing.assert_allclose(batch.grad.numpy(), expected_grad, rtol=1e-6)
