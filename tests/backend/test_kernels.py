"""Each device's kernels against plain float64 numpy formulas.

On CUDA this runs the CuPy kernels and, with mixed dtypes, their array-module fallback. The
``host-kernels`` case runs the same kernels' code compiled for the CPU (``host_cupy``), so the
kernels are checked on machines without a GPU too.
"""
import types

import numpy as np
import pytest

import needle as ndl
from needle.backend_ndarray import fused_updates
from needle.backend_ndarray.kernels import SCRATCH_PIECE, AdamScalars, ArrayRoutines, Scratch, SoftmaxCrossEntropySaved
from needle.backend_ndarray.kernels_cupy import CupyKernels

from host_cupy import compiler_available, host_cupy

SHAPE = (7, 5)


def draw(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def on(device, array):
    return device.xp.array(array)  # a copy: the routines update in place


def host(array):
    return array.get() if hasattr(array, "get") else np.asarray(array)


def tolerance(dtype):
    return {"rtol": 1e-5, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}


@pytest.fixture(scope="module")
def host_kernels():
    """A device-like object: numpy arrays, and needle's CuPy kernels compiled for the host."""
    if not compiler_available():
        pytest.skip("no g++ to compile the kernels for the host")
    return types.SimpleNamespace(name="host-kernels", xp=np, kernels=CupyKernels(host_cupy()))


@pytest.fixture(
    params=[
        "cpu",
        pytest.param("cuda", marks=pytest.mark.skipif(not ndl.cuda().enabled(), reason="no CUDA device")),
        "host-kernels",
    ]
)
def device(request):
    """The CPU, the GPU where there is one, and the GPU kernels run on the host."""
    if request.param == "host-kernels":
        return request.getfixturevalue("host_kernels")
    return ndl.cpu() if request.param == "cpu" else ndl.cuda()


@pytest.fixture(params=[np.float32, np.float64], ids=["float32", "float64"])
def dtype(request):
    return request.param


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_sgd_step(device, dtype, weight_decay):
    weight, gradient = draw(*SHAPE, dtype=dtype, seed=1), draw(*SHAPE, dtype=dtype, seed=2)
    on_device = on(device, weight)
    device.kernels.sgd_steps([(on_device, on(device, gradient))], 0.1, weight_decay, Scratch())
    expected = weight.astype(np.float64) - 0.1 * (gradient + weight_decay * weight.astype(np.float64))
    np.testing.assert_allclose(host(on_device), expected, **tolerance(dtype))
    assert on_device.dtype == dtype


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_momentum_step(device, dtype, weight_decay):
    weight, velocity, gradient = (draw(*SHAPE, dtype=dtype, seed=s) for s in (1, 2, 3))
    weight_d, velocity_d = on(device, weight), on(device, velocity)
    device.kernels.momentum_steps([(weight_d, velocity_d, on(device, gradient))], 0.9, 0.01, weight_decay, Scratch())
    w64 = weight.astype(np.float64)
    expected_velocity = 0.9 * velocity + gradient + weight_decay * w64
    np.testing.assert_allclose(host(velocity_d), expected_velocity, **tolerance(dtype))
    np.testing.assert_allclose(host(weight_d), w64 - 0.01 * expected_velocity, **tolerance(dtype))


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_adam_step(device, dtype, weight_decay):
    weight, first, gradient = (draw(*SHAPE, dtype=dtype, seed=s) for s in (1, 2, 3))
    second = np.abs(draw(*SHAPE, dtype=dtype, seed=4))
    hyper = AdamScalars(0.9, 0.999, 1e-8, weight_decay, step_size=0.01 / (1 - 0.9**3), inverse_sqrt_c2=1 / np.sqrt(1 - 0.999**3))
    arrays = [on(device, a) for a in (weight, first, second)]
    device.kernels.adam_steps([(*arrays, on(device, gradient))], hyper, Scratch())
    w64 = weight.astype(np.float64)
    g = gradient + weight_decay * w64
    expected_first = 0.9 * first + 0.1 * g
    expected_second = 0.999 * second + 0.001 * g * g
    expected_weight = w64 - hyper.step_size * expected_first / (np.sqrt(expected_second) * hyper.inverse_sqrt_c2 + 1e-8)
    for actual, expected in zip(arrays, (expected_weight, expected_first, expected_second)):
        np.testing.assert_allclose(host(actual), expected, **tolerance(dtype))


def test_relu_backward(device, dtype):
    out = np.maximum(draw(*SHAPE, dtype=dtype, seed=1), 0)
    out[0, :2] = 0  # the kink: gradient 0
    out_grad = draw(*SHAPE, dtype=dtype, seed=2)
    result = device.kernels.relu_backward(on(device, out_grad), on(device, out))
    np.testing.assert_array_equal(host(result), np.where(out > 0, out_grad, 0))
    assert result.dtype == dtype


def softmax_cross_entropy_reference(logits, labels):
    z = logits.astype(np.float64)
    shifted = z - z.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(len(labels))
    loss = -log_softmax[rows, labels].mean()
    one_hot = np.zeros_like(z)
    one_hot[rows, labels] = 1
    return loss, (np.exp(log_softmax) - one_hot) / len(labels)


@pytest.mark.parametrize("label_dtype", [np.int64, np.uint8], ids=["int64", "uint8"])
@pytest.mark.parametrize("batch, classes", [(7, 5), (300, 10), (1, 1)])
def test_softmax_cross_entropy_loss_and_gradient(device, dtype, batch, classes, label_dtype):
    logits = draw(batch, classes, dtype=dtype, seed=1) * 20  # large enough that an unshifted exp would overflow float32 at 89
    logits[0, 0] = 95
    logits[-1, -1] = 1000  # overflows exp() in both dtypes unless the row's true maximum is subtracted
    labels = np.random.default_rng(2).integers(0, classes, batch).astype(label_dtype)
    expected_loss, expected_gradient = softmax_cross_entropy_reference(logits, labels)
    kernels = device.kernels
    loss, saved = kernels.softmax_cross_entropy(on(device, logits), on(device, labels))
    assert loss.shape == () and loss.dtype == dtype
    np.testing.assert_allclose(host(loss), expected_loss, **tolerance(dtype))
    out_grad = on(device, np.asarray(2.0, dtype=dtype))
    assert isinstance(saved, SoftmaxCrossEntropySaved) and saved.totals.shape == (batch,)
    gradient = kernels.softmax_cross_entropy_gradient(saved, out_grad)
    np.testing.assert_allclose(host(gradient), 2.0 * expected_gradient, **tolerance(dtype))


def test_softmax_cross_entropy_takes_a_transposed_view(device):
    logits = draw(5, 4, seed=3)
    labels = np.array([0, 3, 1, 2])
    expected_loss, expected_gradient = softmax_cross_entropy_reference(logits.T, labels)
    loss, saved = device.kernels.softmax_cross_entropy(on(device, logits).T, on(device, labels))
    np.testing.assert_allclose(host(loss), expected_loss, rtol=1e-5)
    gradient = device.kernels.softmax_cross_entropy_gradient(saved, on(device, np.float32(1.0)))
    np.testing.assert_allclose(host(gradient), expected_gradient, rtol=1e-5, atol=1e-7)


def test_mixed_dtypes_take_the_array_module_path(device):
    """A float64 gradient on a float32 weight: no kernel takes it, and the values still hold."""
    weight, velocity = draw(*SHAPE, seed=1), draw(*SHAPE, seed=2)
    gradient = draw(*SHAPE, dtype=np.float64, seed=3)
    weight_d, velocity_d = on(device, weight), on(device, velocity)
    device.kernels.momentum_steps([(weight_d, velocity_d, on(device, gradient))], 0.5, 0.1, 0.0, Scratch())
    expected_velocity = 0.5 * velocity + gradient
    np.testing.assert_allclose(host(velocity_d), expected_velocity, rtol=1e-5)
    np.testing.assert_allclose(host(weight_d), weight - 0.1 * expected_velocity, rtol=1e-5, atol=1e-6)
    assert weight_d.dtype == np.float32
    out = on(device, np.maximum(draw(*SHAPE, seed=4), 0))
    result = device.kernels.relu_backward(on(device, gradient), out)
    np.testing.assert_array_equal(host(result), np.where(host(out) > 0, gradient, 0))


def test_scratch_is_reused_and_grows():
    scratch = Scratch()
    small = scratch.like(np, np.empty((2, 3), np.float32))
    assert small.shape == (2, 3)
    again = scratch.like(np, np.empty((3, 2), np.float32))
    assert again.shape == (3, 2) and _base(again) is _base(small)
    big = scratch.like(np, np.empty((100, 100), np.float32))
    assert big.shape == (100, 100) and _base(big) is not _base(small)
    assert scratch.like(np, np.empty((3, 2), np.float32)).shape == (3, 2)
    assert _base(scratch.like(np, np.empty((3, 2), np.float32))) is _base(big), "old views are dropped"
    assert scratch.like(np, np.empty(4, np.float64)).dtype == np.float64


def test_each_scratch_owns_its_memory():
    """Two owners (two optimizers) never get the same buffer."""
    first, second = Scratch(), Scratch()
    like = np.empty(5, np.float32)
    assert not np.shares_memory(first.like(np, like), second.like(np, like))


def test_the_routines_keep_no_mutable_state(device):
    """All per-step memory comes from the caller's Scratch, so threads cannot collide inside the routines."""
    kernels = device.kernels
    # NOTE: the _fused_* slots hold the C updates or None (never built for a GPU module): fixed at construction.
    state = {
        name: value for name, value in vars(kernels).items()
        if name != "xp" and not callable(value) and not (name.startswith("_fused_") and value is None)
    }
    if isinstance(kernels, CupyKernels):
        state.pop("_dummies")  # the empty slots' placeholders: no kernel reads or writes them
    assert state == {}


def _base(array):
    while getattr(array, "base", None) is not None:
        array = array.base
    return array


def test_the_device_keeps_one_set_of_routines():
    assert ndl.cpu().kernels is ndl.cpu().kernels


@pytest.mark.parametrize("kernel_device", ["cuda", "host-kernels"])
def test_an_out_of_range_label_makes_the_gpu_loss_nan(kernel_device, request):
    """No range check on a GPU (it would sync every step); the loss shows the bad label instead."""
    device = request.getfixturevalue("cuda_device" if kernel_device == "cuda" else "host_kernels")
    logits = device.xp.asarray(draw(3, 4))
    for bad in ([0, 4, 1], [0, -1, 1]):
        loss, saved = device.kernels.softmax_cross_entropy(logits, device.xp.asarray(np.array(bad)))
        assert np.isnan(float(loss))
        gradient = host(device.kernels.softmax_cross_entropy_gradient(saved, device.xp.asarray(np.float32(1.0))))
        assert np.all(np.isfinite(gradient)) and np.all(gradient[1] > 0), "the bad row's gradient is plain softmax"


def train_a_few_steps(optimizer, create_graph):
    """Parameters of a small MLP after five steps on fixed data, as numpy arrays."""
    rng = np.random.default_rng(5)
    np.random.seed(5)
    model = ndl.nn.Sequential(ndl.nn.Linear(6, 8), ndl.nn.ReLU(), ndl.nn.Linear(8, 4))
    opt = optimizer(model.parameters())
    x = ndl.Tensor(rng.standard_normal((10, 6)).astype(np.float32), requires_grad=False)
    y = ndl.Tensor(rng.integers(0, 4, 10).astype(np.uint8), dtype="uint8", requires_grad=False)
    for _ in range(5):
        opt.reset_grad()
        loss = ndl.nn.SoftmaxLoss()(model(x), y)
        loss.backward(create_graph=create_graph)
        opt.step()
    return [p.numpy() for p in model.parameters()]


@pytest.mark.parametrize("create_graph", [True, False])
@pytest.mark.parametrize(
    "optimizer",
    [
        lambda params: ndl.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01),
        lambda params: ndl.optim.SGD(params, lr=0.1),
        lambda params: ndl.optim.Adam(params, lr=0.01, weight_decay=0.01),
    ],
    ids=["sgd-momentum", "sgd", "adam"],
)
def test_training_through_the_kernels_matches_the_cpu(optimizer, create_graph, host_kernels, monkeypatch):
    """Ops and optimizers reach the kernels through device.kernels with the right arguments."""
    expected = train_a_few_steps(optimizer, create_graph)
    monkeypatch.setattr(ndl.cpu(), "kernels", host_kernels.kernels)
    actual = train_a_few_steps(optimizer, create_graph)
    for got, want in zip(actual, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert any(not np.allclose(p, 0) for p in actual)


def test_softmax_cross_entropy_takes_strided_labels(device):
    logits = draw(4, 3, seed=6)
    labels = np.array([0, 9, 2, 9, 1, 9, 2, 9])[::2]  # a strided view: 0, 2, 1, 2
    expected_loss, expected_gradient = softmax_cross_entropy_reference(logits, labels)
    loss, saved = device.kernels.softmax_cross_entropy(on(device, logits), on(device, np.array([0, 9, 2, 9, 1, 9, 2, 9]))[::2])
    np.testing.assert_allclose(host(loss), expected_loss, rtol=1e-5)
    gradient = device.kernels.softmax_cross_entropy_gradient(saved, on(device, np.float32(1.0)))
    np.testing.assert_allclose(host(gradient), expected_gradient, rtol=1e-5, atol=1e-7)


MANY_SHAPES = [(3, 4), (5,), (1, 4), (2, 3, 2), (7,), (1,), (4, 4), (6, 1), (2, 5), (3,), (8,)]  # more than 8 slots


@pytest.mark.parametrize("routine", ["sgd", "momentum", "adam"])
def test_updates_of_many_parameters_at_once_match_one_by_one(device, routine):
    """The *_steps methods (multi-tensor kernels on CUDA) against the CPU routines, one parameter a call."""
    rng = np.random.default_rng(11)
    arrays = [
        [rng.standard_normal(shape).astype(np.float32) for shape in MANY_SHAPES]
        for _ in range(4)  # weights, first state, second state, gradients
    ]
    arrays[2] = [np.abs(a) for a in arrays[2]]
    arrays[3][4] = arrays[3][4].astype(np.float64)  # one float64 gradient: not kernel-shaped
    hyper = AdamScalars(0.9, 0.999, 1e-8, 0.01, step_size=0.01, inverse_sqrt_c2=1.5)
    on_device = [[on(device, a) for a in group] for group in arrays]
    weights, firsts, seconds, gradients = on_device
    if routine == "sgd":
        device.kernels.sgd_steps(list(zip(weights, gradients)), 0.1, 0.01, Scratch())
    elif routine == "momentum":
        device.kernels.momentum_steps(list(zip(weights, firsts, gradients)), 0.9, 0.01, 0.01, Scratch())
    else:
        device.kernels.adam_steps(list(zip(weights, firsts, seconds, gradients)), hyper, Scratch())
    reference = ndl.cpu().kernels
    expected = [[a.copy() for a in group] for group in arrays]
    for w, m, v, g in zip(*expected):  # one parameter a call
        if routine == "sgd":
            reference.sgd_steps([(w, g)], 0.1, 0.01, Scratch())
        elif routine == "momentum":
            reference.momentum_steps([(w, m, g)], 0.9, 0.01, 0.01, Scratch())
        else:
            reference.adam_steps([(w, m, v, g)], hyper, Scratch())
    for got_group, want_group in zip(on_device[:3], expected[:3]):
        for got, want in zip(got_group, want_group):
            np.testing.assert_allclose(host(got), want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(host(weights[0]), arrays[0][0])


def test_softmax_cross_entropy_in_float16_takes_the_array_module_path_on_both_sides(device):
    """No kernel takes float16: forward and gradient both fall back, through the same saved state."""
    logits = draw(6, 4, seed=7).astype(np.float16)
    labels = np.array([0, 3, 1, 2, 2, 0])
    expected_loss, expected_gradient = softmax_cross_entropy_reference(logits, labels)
    loss, saved = device.kernels.softmax_cross_entropy(on(device, logits), on(device, labels))
    assert loss.dtype == np.float16 and saved.exp_shifted.dtype == np.float16
    np.testing.assert_allclose(host(loss), expected_loss, rtol=2e-3)
    gradient = device.kernels.softmax_cross_entropy_gradient(saved, on(device, np.float16(1.0)))
    np.testing.assert_allclose(host(gradient), expected_gradient, rtol=1e-2, atol=1e-3)


def test_the_old_names_of_the_kernels_still_import():
    """Code written before the rename (``device.fused``, ``backend_ndarray.fused``) keeps working."""
    from needle.backend_ndarray import fused, fused_cupy, kernels, kernels_cupy

    assert ndl.cpu().fused is ndl.cpu().kernels
    assert fused.ArrayRoutines is kernels.ArrayRoutines and fused.Scratch is kernels.Scratch
    assert fused_cupy.CupyKernels is kernels_cupy.CupyKernels


@pytest.fixture(params=["fused", "numpy calls"])
def cpu_kernels(request):
    """The CPU's routines with the one-pass C updates (when built) and with the numpy calls only."""
    kernels = ArrayRoutines(np)
    if request.param == "fused":
        if kernels._fused_momentum_step is None:
            pytest.skip(f"the updates are {fused_updates.describe()}")
    else:
        kernels._fused_momentum_step = kernels._fused_sgd_step = kernels._fused_adam_step = None
    return kernels


@pytest.mark.parametrize("shape", [(SCRATCH_PIECE,), (SCRATCH_PIECE + 1,), (300, 250), (3 * SCRATCH_PIECE,)])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_a_large_update_equals_the_whole_array_arithmetic_bit_for_bit(shape, weight_decay, cpu_kernels):
    weight, velocity, gradient = (draw(*shape, seed=s) for s in (1, 2, 3))
    # The reference: every pass over the whole array, the product rounded on its own.
    expected_velocity = velocity * np.float32(0.9) + gradient
    if weight_decay:
        expected_velocity += weight * weight_decay
    expected_weight = weight - expected_velocity * 0.01
    expected_sgd = weight - gradient * 0.1
    weight_m, velocity_m, weight_s = weight.copy(), velocity.copy(), weight.copy()
    scratch = Scratch()
    cpu_kernels.momentum_steps([(weight_m, velocity_m, gradient)], 0.9, 0.01, weight_decay, scratch)
    cpu_kernels.sgd_steps([(weight_s, gradient)], 0.1, 0.0, scratch)
    assert np.array_equal(velocity_m, expected_velocity) and np.array_equal(weight_m, expected_weight)
    assert np.array_equal(weight_s, expected_sgd)
    assert all(buffer.size <= SCRATCH_PIECE for buffer in scratch._buffers.values())


def test_a_strided_weight_is_updated_whole_and_in_place(cpu_kernels):
    base = draw(400, 300)
    weight = base.T  # not C-contiguous: no flat pieces of it exist
    gradient, velocity = draw(300, 400, seed=2), draw(300, 400, seed=3)
    expected_velocity = velocity * np.float32(0.9) + gradient
    expected = weight - expected_velocity * 0.01
    cpu_kernels.momentum_steps([(weight, velocity, gradient)], 0.9, 0.01, 0.0, Scratch())
    assert np.array_equal(weight, expected) and np.array_equal(velocity, expected_velocity)
    assert np.array_equal(base.T, expected)  # the update wrote through the view


@pytest.mark.parametrize("routine", ["sgd", "momentum", "adam"])
def test_updates_read_the_old_values_from_sources_on_every_device(device, routine):
    """``sources`` (an update out of place): the target ends with what the update in place
    gives, whatever it held, and the source keeps the old values."""
    weight, gradient = draw(*SHAPE, seed=21), draw(*SHAPE, seed=22)
    first, second = draw(*SHAPE, seed=23), np.abs(draw(*SHAPE, seed=24))
    hyper = AdamScalars(0.9, 0.999, 1e-8, 0.01, step_size=0.01, inverse_sqrt_c2=1.5)

    def step(target, sources=None):
        state = [on(device, first), on(device, second)]
        g = on(device, gradient)
        if routine == "sgd":
            device.kernels.sgd_steps([(target, g)], 0.1, 0.01, Scratch(), sources)
        elif routine == "momentum":
            device.kernels.momentum_steps([(target, state[0], g)], 0.9, 0.01, 0.01, Scratch(), sources)
        else:
            device.kernels.adam_steps([(target, state[0], state[1], g)], hyper, Scratch(), sources)
        return [host(target)] + [host(s) for s in state]

    in_place = step(on(device, weight))
    source, target = on(device, weight), on(device, np.full(SHAPE, np.nan, np.float32))
    out_of_place = step(target, {id(target): source})
    for got, want in zip(out_of_place, in_place):
        assert got.tobytes() == want.tobytes()
    assert host(source).tobytes() == weight.tobytes()
