"""The one-pass C updates (needle/backend_ndarray/_fused_updates.c): the numpy calls' values, or a refusal.

Each accepted update must equal the numpy calls of ``ArrayRoutines`` bit for bit (float32 and
float64, with and without weight decay, over many steps); each array it does not take must be
refused with False and left as it was, so that the numpy calls run instead. CI sets
``NEEDLE_REQUIRE_C_EXTENSIONS=1``: there the extension must have been built, so these checks
cannot pass by skipping.
"""
import os

import numpy as np
import pytest

import needle as ndl
from needle.backend_ndarray import fused_updates
from needle.backend_ndarray.kernels import AdamScalars, ArrayRoutines, Scratch

built = pytest.mark.skipif(not fused_updates.ENABLED, reason=f"the updates are {fused_updates.describe()}")


def draw(shape, dtype, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def test_ci_builds_the_extension():
    if os.environ.get("NEEDLE_REQUIRE_C_EXTENSIONS") != "1":
        pytest.skip("only where NEEDLE_REQUIRE_C_EXTENSIONS=1 (CI)")
    assert fused_updates.ENABLED, fused_updates.describe()
    assert ndl.cpu().kernels._fused_momentum_step is fused_updates.momentum_step


def numpy_only():
    kernels = ArrayRoutines(np)
    kernels._fused_momentum_step = kernels._fused_sgd_step = kernels._fused_adam_step = None
    return kernels


@built
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1,), (5, 3), (784, 128), (3, 32771)])
@pytest.mark.parametrize("weight_decay", [0.0, 1e-3])
@pytest.mark.parametrize("momentum", [0.0, 0.5, 0.9])
def test_every_step_equals_the_numpy_calls_bit_for_bit(dtype, shape, weight_decay, momentum):
    weight, velocity = draw(shape, dtype, 1), draw(shape, dtype, 2)
    fused, reference = ArrayRoutines(np), numpy_only()
    states = [(weight.copy(), velocity.copy()), (weight.copy(), velocity.copy())]
    for step in range(6):
        gradient = draw(shape, dtype, 10 + step)
        for kernels, (w, v) in zip((fused, reference), states):
            if momentum:
                kernels.momentum_steps([(w, v, gradient)], momentum, 0.1 * (1 - momentum), weight_decay, Scratch())
            else:
                kernels.sgd_steps([(w, gradient)], 0.1, weight_decay, Scratch())
    (w_fused, v_fused), (w_numpy, v_numpy) = states
    assert w_fused.tobytes() == w_numpy.tobytes() and v_fused.tobytes() == v_numpy.tobytes()
    assert not np.array_equal(w_fused, weight)  # the steps did change the weight


@built
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1,), (5, 3), (784, 128)])
@pytest.mark.parametrize("weight_decay", [0.0, 1e-2])
def test_every_adam_step_equals_the_numpy_calls_bit_for_bit(dtype, shape, weight_decay):
    weight = draw(shape, dtype, 1)
    fused, reference = ArrayRoutines(np), numpy_only()
    states = [[weight.copy(), np.zeros_like(weight), np.zeros_like(weight)] for _ in range(2)]
    for t in range(1, 7):
        gradient = draw(shape, dtype, 10 + t)
        hyper = AdamScalars(0.9, 0.999, 1e-8, weight_decay, step_size=0.01 / (1 - 0.9**t),
                            inverse_sqrt_c2=1 / np.sqrt(1 - 0.999**t).item())
        for kernels, (w, m, v) in zip((fused, reference), states):
            kernels.adam_steps([(w, m, v, gradient)], hyper, Scratch())
    for fused_array, numpy_array in zip(*states):
        assert fused_array.tobytes() == numpy_array.tobytes()
    assert not np.array_equal(states[0][0], weight)
    w, m, v = states[0]
    assert fused_updates.adam_step(w, m, v, gradient, 0.9, 0.1, 0.999, 0.001, 1.0, 1e-8, 0.01, weight_decay) is True


@built
def test_denormals_infinities_and_nans_round_as_numpy_does():
    special = np.array([1e-40, -1e-45, np.inf, -np.inf, np.nan, 0.0, -0.0, 3.4e38], np.float32)
    weight, velocity, gradient = special.copy(), special[::-1].copy(), np.roll(special, 3)
    w_numpy, v_numpy = weight.copy(), velocity.copy()
    with np.errstate(all="ignore"):
        numpy_only().momentum_steps([(w_numpy, v_numpy, gradient)], 0.9, 0.05, 0.01, Scratch())
    assert fused_updates.momentum_step(weight, velocity, gradient, 0.9, 0.05, 0.01) is True
    assert weight.tobytes() == w_numpy.tobytes() and velocity.tobytes() == v_numpy.tobytes()


def refused_cases():
    """(why, weight, velocity, gradient): arrays the momentum update must not take; ``sgd``:
    whether ``(weight, gradient)`` alone must be refused by the plain SGD update too."""
    w, v, g = (draw((40, 30), np.float32, s) for s in (1, 2, 3))
    read_only = w.copy()
    read_only.flags.writeable = False
    shared = np.zeros(1800, np.float32)
    return [
        ("a strided weight", draw((30, 40), np.float32, 4).T, v.copy(), g, True),
        ("a Fortran-ordered velocity", w.copy(), np.asfortranarray(v), g, False),
        ("float16", w.astype(np.float16), v.astype(np.float16), g.astype(np.float16), True),
        ("byte-swapped float32", w.astype(w.dtype.newbyteorder()), v.astype(v.dtype.newbyteorder()),
         g.astype(g.dtype.newbyteorder()), True),
        ("mixed dtypes", w.copy(), v.copy(), g.astype(np.float64), True),
        ("another size", w.copy(), v.copy(), g[:20], True),
        ("a read-only weight", read_only, v.copy(), g, True),
        ("a weight and velocity sharing memory", shared[:1200].reshape(40, 30), shared[600:].reshape(40, 30), g, False),
        ("a weight that is the gradient", w.copy(), v.copy(), "weight", True),
        ("lists", [1.0, 2.0], [0.0, 0.0], [1.0, 1.0], True),
    ]


@built
@pytest.mark.parametrize("why, weight, velocity, gradient, sgd", refused_cases(), ids=[case[0] for case in refused_cases()])
def test_what_it_does_not_take_is_refused_and_left_unchanged(why, weight, velocity, gradient, sgd):
    if isinstance(gradient, str):
        gradient = weight
    before = [np.array(a, copy=True) for a in (weight, velocity, gradient)]
    assert fused_updates.momentum_step(weight, velocity, gradient, 0.9, 0.01, 0.0) is False
    second = velocity if isinstance(velocity, list) else np.zeros_like(velocity)
    assert fused_updates.adam_step(weight, velocity, second, gradient, 0.9, 0.1, 0.999, 0.001, 1.0, 1e-8, 0.1, 0.0) is False
    if sgd:
        assert fused_updates.sgd_step(weight, gradient, 0.1, 0.0) is False
    for array, saved in zip((weight, velocity, gradient), before):
        assert np.array_equal(np.asarray(array), saved, equal_nan=True)


@built
def test_a_refused_update_runs_as_numpy_calls_with_the_same_values():
    base = draw((30, 40), np.float32, 4)
    weight, expected = base.T, base.T.copy()
    velocity, gradient = draw((40, 30), np.float32, 5), draw((40, 30), np.float32, 6)
    v_expected = velocity.copy()
    numpy_only().momentum_steps([(expected, v_expected, gradient)], 0.9, 0.01, 0.0, Scratch())
    ndl.cpu().kernels.momentum_steps([(weight, velocity, gradient)], 0.9, 0.01, 0.0, Scratch())
    assert weight.tobytes() == expected.tobytes() and velocity.tobytes() == v_expected.tobytes()
    assert np.array_equal(base.T, expected)  # written through the view


def test_the_routines_of_a_gpu_array_module_never_call_the_extension():
    class FakeCupy:
        __name__ = "cupy"

    kernels = ArrayRoutines(FakeCupy())
    assert kernels._fused_momentum_step is None and kernels._fused_sgd_step is None


TRAINING = """
import hashlib, sys
import numpy as np
import needle as ndl
import needle.nn as nn

def train(optimizer_name):
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(20, 33), nn.ReLU(), nn.Linear(33, 5))
    if optimizer_name == "sgd":
        opt = ndl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    elif optimizer_name == "plain":
        opt = ndl.optim.SGD(model.parameters(), lr=0.1, weight_decay=1e-3)
    else:
        opt = ndl.optim.Adam(model.parameters(), lr=0.01, weight_decay=1e-3)
    loss_fn = nn.SoftmaxLoss()
    rng = np.random.default_rng(1)
    for _ in range(8):
        x = ndl.Tensor(rng.standard_normal((16, 20)).astype(np.float32))
        y = ndl.Tensor(rng.integers(0, 5, 16))
        opt.reset_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.numpy().tobytes())
    return digest.hexdigest()

print(" ".join(train(name) for name in ("sgd", "plain", "adam")))
"""


@built
def test_training_gives_the_same_bits_with_and_without_the_extension(tmp_path):
    """The end-to-end promise: an install without a C compiler trains to exactly the same weights."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(TRAINING)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    digests = {}
    for setting in ("1", "0"):
        run = subprocess.run([sys.executable, str(script)], env={**env, "NEEDLE_FUSED_UPDATES": setting},
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        digests[setting] = run.stdout.split()
    assert len(digests["1"]) == 3 and digests["1"] == digests["0"]


# ---- out of place: the old values read from ``sources`` (needle.weight_handover) ----------------
def _step_all(kernels, kind, weight, state, gradient, sources=None):
    if kind == "sgd":
        kernels.sgd_steps([(weight, gradient)], 0.1, 1e-3, Scratch(), sources)
    elif kind == "momentum":
        kernels.momentum_steps([(weight, state[0], gradient)], 0.9, 0.01, 1e-3, Scratch(), sources)
    else:
        hyper = AdamScalars(0.9, 0.999, 1e-8, 1e-3, step_size=0.1, inverse_sqrt_c2=3.0)
        kernels.adam_steps([(weight, state[0], state[1], gradient)], hyper, Scratch(), sources)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "numpy-calls"])
@pytest.mark.parametrize("kind", ["sgd", "momentum", "adam"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_update_out_of_place_writes_the_in_place_values_and_keeps_the_source(fused, kind, dtype):
    if fused and not fused_updates.ENABLED:
        pytest.skip(f"the updates are {fused_updates.describe()}")
    kernels = ArrayRoutines(np) if fused else numpy_only()
    shape = (37, 11)
    weight, gradient = draw(shape, dtype, 1), draw(shape, dtype, 2)
    in_place, in_place_state = weight.copy(), [draw(shape, dtype, 3), np.abs(draw(shape, dtype, 4))]
    out_state = [array.copy() for array in in_place_state]
    _step_all(kernels, kind, in_place, in_place_state, gradient)
    source, target = weight.copy(), np.full(shape, np.nan, dtype)  # the new buffer's old contents must not matter
    _step_all(kernels, kind, target, out_state, gradient, {id(target): source})
    assert target.tobytes() == in_place.tobytes()
    assert all(a.tobytes() == b.tobytes() for a, b in zip(out_state, in_place_state))
    assert source.tobytes() == weight.tobytes(), "the old values were changed"


@built
def test_a_source_that_overlaps_the_weight_is_refused_unchanged():
    weight, velocity, gradient = (draw((8,), np.float32, seed) for seed in range(3))
    before = weight.copy(), velocity.copy()
    assert fused_updates.momentum_step(weight, velocity, gradient, 0.9, 0.1, 0.0, weight) is False
    assert fused_updates.momentum_step(weight, velocity, gradient, 0.9, 0.1, 0.0, draw((9,), np.float32, 4)) is False
    assert weight.tobytes() == before[0].tobytes() and velocity.tobytes() == before[1].tobytes()
