"""The optimizer step a CUDA graph replays (needle.compiler.graph_update), checked on the host.

needle's CUDA kernels run compiled for the CPU (``host_cupy``), and a tape stands in for the
stream capture: a kernel launched while the tape records is kept, not run, and ``launch()``
runs the kept kernels in order, as a graph launch does. So a recorded step, replayed with the
scalars put in its table before each launch, can be compared bit for bit with eager steps.
"""
import numpy as np
import pytest

import needle as ndl
from needle.backend_ndarray import NDArray
from needle.backend_ndarray.kernels import Scratch
from needle.backend_ndarray.kernels_cupy import CupyKernels
from needle.compiler import graph_update
from needle.compiler.graph_update import GraphUpdate
from needle.compiler.scalar_table import ScalarTable

from host_cupy import compiler_available
from taped_cupy import Tape, taped_cupy

pytestmark = pytest.mark.skipif(not compiler_available(), reason="no g++ to compile the kernels for the host")

SHAPES = [(3, 4), (4,), (2, 2, 2), (5, 1), (6,), (1,), (3, 3), (2,), (4, 2), (7,)]  # more than 8: two launches


def upload(device_array, host_array):
    device_array[...] = host_array


@pytest.fixture
def tape(monkeypatch):
    """A tape, with the CPU device's kernels swapped for the taped host-compiled CUDA kernels."""
    tape = Tape()
    monkeypatch.setattr(ndl.cpu(), "kernels", CupyKernels(taped_cupy(tape)))
    return tape


def parameters(seed=0, dtypes=None):
    rng = np.random.default_rng(seed)
    dtypes = dtypes or [np.float32] * len(SHAPES)
    return [ndl.nn.Parameter(ndl.Tensor(rng.standard_normal(s).astype(d), dtype=np.dtype(d).name)) for s, d in zip(SHAPES, dtypes)]


def gradients(step, params):
    rng = np.random.default_rng(100 + step)
    return [rng.standard_normal(p.shape).astype(p.dtype) for p in params]


def state_arrays(opt):
    dicts = [opt.u.scaled] if isinstance(opt, ndl.optim.SGD) else [opt.m, opt.v]
    return [np.array(d[p]) for d in dicts for p in opt.params if p in d]


SGD_CHANGES = {4: ("lr", 0.05), 7: ("momentum", 0.5), 9: ("weight_decay", 0.0)}
ADAM_CHANGES = {5: ("lr", 0.003), 8: ("beta1", 0.8)}
CASES = {
    "sgd": (lambda ps: ndl.optim.SGD(ps, lr=0.1, weight_decay=0.01), {4: ("lr", 0.05)}),
    "momentum": (lambda ps: ndl.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01), SGD_CHANGES),
    "adam": (lambda ps: ndl.optim.Adam(ps, lr=0.01, weight_decay=0.01), ADAM_CHANGES),
}
STEPS = 12


def eager_run(case):
    make, changes = CASES[case]
    params = parameters()
    opt = make(params)
    for step in range(STEPS):
        if step in changes:
            setattr(opt, *changes[step])
        for p, g in zip(params, gradients(step, params)):
            p.grad = ndl.Tensor(g, dtype=p.dtype)
        opt.step()
    return params, opt


def replayed_run(case, tape):
    """Step 0 eagerly (as capture_cuda's eager call), then the step recorded once and replayed."""
    make, changes = CASES[case]
    params = parameters()
    opt = make(params)
    for p, g in zip(params, gradients(0, params)):
        p.grad = ndl.Tensor(g, dtype=p.dtype)
    opt.step()
    buffers = [np.empty(p.shape, p.dtype) for p in params]  # the graph's gradient buffers
    for p, buffer in zip(params, buffers):
        p.grad = ndl.Tensor.make_const(NDArray.wrap(buffer, ndl.cpu()))
    before = [p.numpy().copy() for p in params]
    writes = []

    def counting_upload(device_array, host_array):
        writes.append(host_array.ndim == 2)  # the rows (True) or the row index
        upload(device_array, host_array)

    tape.recording = True
    try:
        update = GraphUpdate.record(opt, counting_upload)
    finally:
        tape.recording = False
    assert update is not None and tape.kernels, "recorded"
    assert all(np.array_equal(p.numpy(), b) for p, b in zip(params, before)), "recording runs nothing"
    for step in range(1, STEPS):
        if step in changes:
            setattr(opt, *changes[step])
        for buffer, g in zip(buffers, gradients(step, params)):
            buffer[...] = g  # what the graph's backward writes
        assert update.ready()
        update.before_launch()
        tape.launch()
    update.table_writes = sum(writes)
    return params, opt, update


@pytest.mark.parametrize("case", list(CASES))
def test_a_replayed_update_is_bitwise_the_eager_one_with_changed_hyperparameters(case, tape, monkeypatch):
    monkeypatch.setattr(graph_update, "ROWS_AHEAD", 3)  # Adam uses its rows up twice in 11 replays
    expected_params, expected_opt = eager_run(case)
    params, opt, update = replayed_run(case, tape)
    for got, want in zip(params, expected_params):
        assert np.array_equal(got.numpy(), want.numpy())
    for got, want in zip(state_arrays(opt), state_arrays(expected_opt)):
        assert np.array_equal(got, want)
    # the first replay, each change, and (Adam) rows used up; else the row read holds the scalars
    assert update.table_writes == {"sgd": 2, "momentum": 4, "adam": 1 + 2 + 2}[case]
    if case == "adam":
        assert opt.t == expected_opt.t == STEPS
    if case == "momentum":
        assert opt.u.momentum == expected_opt.u.momentum == 0.5, "rescaled to the new momentum, as eager"
    assert not np.array_equal(params[0].numpy(), parameters()[0].numpy())


def test_the_table_kernels_give_the_scalar_kernels_values_in_float64(tape):
    kernels = ndl.cpu().kernels
    rng = np.random.default_rng(3)
    weights = [rng.standard_normal(s) for s in SHAPES]
    velocities = [rng.standard_normal(s) for s in SHAPES]
    grads = [rng.standard_normal(s) for s in SHAPES]
    expected_w, expected_v = [w.copy() for w in weights], [v.copy() for v in velocities]
    kernels.momentum_steps(list(zip(expected_w, expected_v, grads)), 0.9, 0.01, 0.001, Scratch())
    table = ScalarTable(np, np.float64, 3, 1, upload, advances=False)
    table.before_launch((0.9, 0.01, 0.001), None)
    assert kernels.steps_from_table("momentum", list(zip(weights, velocities, grads)), table)
    assert all(np.array_equal(a, b) for a, b in zip(weights + velocities, expected_w + expected_v))


def test_updates_of_another_dtype_than_the_table_run_nothing(tape):
    kernels = ndl.cpu().kernels
    weight, gradient = np.ones(3, np.float64), np.ones(3, np.float64)
    table = ScalarTable(np, np.float32, 2, 1, upload, advances=False)
    table.before_launch((0.5, 0.0), None)
    assert not kernels.steps_from_table("sgd", [(weight, gradient)], table)
    mixed = (np.ones(3, np.float32), np.ones(3, np.float64))
    assert not kernels.steps_from_table("sgd", [mixed], table)
    assert np.array_equal(weight, np.ones(3)) and np.array_equal(mixed[0], np.ones(3))


def test_the_row_moves_on_in_the_graph_and_is_read_by_the_next_launch(tape):
    kernels = ndl.cpu().kernels
    table = ScalarTable(np, np.float32, 2, 3, upload, advances=True)
    table.before_launch((1.0, 0.0), lambda k: (1.0 + k, 0.0))
    weight, gradient = np.zeros(2, np.float32), np.ones(2, np.float32)
    tape.recording = True
    kernels.steps_from_table("sgd", [(weight, gradient)], table)
    kernels.next_table_row(table)
    tape.recording = False
    tape.launch()
    assert table.row.tolist() == [1] and weight.tolist() == [-1.0, -1.0]
    assert not table.before_launch((2.0, 0.0), None), "the row the launch reads holds them: no copy"
    tape.launch()
    assert weight.tolist() == [-3.0, -3.0]


def test_the_table_is_written_only_when_the_next_row_differs():
    uploads = []

    def counting_upload(device_array, host_array):
        uploads.append(host_array.shape)
        device_array[...] = host_array

    fixed = ScalarTable(np, np.float32, 2, 1, counting_upload, advances=False)
    assert fixed.before_launch((0.1, 0.0), None) and len(uploads) == 2  # the rows and the row index
    assert not fixed.before_launch((0.1, 0.0), None) and len(uploads) == 2
    assert fixed.before_launch((0.2, 0.0), None) and fixed.values.tolist() == [[np.float32(0.2), 0.0]]
    stepping = ScalarTable(np, np.float64, 1, 2, counting_upload, advances=True)
    upcoming = lambda k: (10.0 + k,)  # noqa: E731
    assert stepping.before_launch((10.0,), upcoming) and stepping.values.tolist() == [[10.0], [11.0]]
    stepping.row[0] += 1  # the graph's launch
    assert not stepping.before_launch((11.0,), upcoming)
    stepping.row[0] += 1
    assert stepping.before_launch((12.0,), lambda k: (12.0 + k,)), "rows used up: written anew"
    assert stepping.values.tolist() == [[12.0], [13.0]] and stepping.row.tolist() == [0]


def test_ready_while_the_optimizer_holds_the_recorded_arrays(tape):
    params, opt, update = replayed_run("momentum", tape)
    assert update.ready()
    opt.lr = 0.5  # a hyperparameter: read at the next launch
    assert update.ready()
    opt.load_state_dict(opt.state_dict())  # new velocity arrays: the kernels would update the old ones
    assert not update.ready()
    params, opt, update = replayed_run("momentum", tape)
    opt.momentum = 0.0  # eager takes the plain SGD kernel now
    assert not update.ready()
    params, opt, update = replayed_run("adam", tape)
    opt.params = list(opt.params)
    assert not update.ready()
    params, opt, update = replayed_run("adam", tape)
    opt.m[params[0]] = opt.m[params[0]].copy()
    assert not update.ready()


def test_what_is_not_recorded_stays_a_host_call(tape, monkeypatch):
    class MySGD(ndl.optim.SGD):
        pass

    def recorded(opt):
        tape.kernels.clear()
        tape.recording = True
        try:
            return GraphUpdate.record(opt, upload)
        finally:
            tape.recording = False

    params = parameters()
    for p, g in zip(params, gradients(0, params)):
        p.grad = ndl.Tensor(g)
    assert recorded(MySGD(params, lr=0.1)) is None, "a subclass may change step()"
    assert recorded(ndl.optim.SGD(params, lr=0.1, momentum=0.9)) is None, "no velocities yet (no eager step)"
    mixed = parameters(dtypes=[np.float32] * (len(SHAPES) - 1) + [np.float64])
    for p, g in zip(mixed, gradients(0, mixed)):
        p.grad = ndl.Tensor(g, dtype=p.dtype)
    assert recorded(ndl.optim.SGD(mixed, lr=0.1)) is None, "two dtypes"
    no_grads = parameters()
    assert recorded(ndl.optim.SGD(no_grads, lr=0.1)) is None, "nothing to update"
    assert tape.kernels == [], "nothing was recorded for any of them"
    monkeypatch.undo()  # the CPU's own kernels: no table kernels
    assert GraphUpdate.record(ndl.optim.SGD(params, lr=0.1), upload) is None
