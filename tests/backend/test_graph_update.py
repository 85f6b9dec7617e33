"""The optimizer step a CUDA graph replays (needle.compiler.graph_update), checked on the host.

needle's CUDA kernels run compiled for the CPU (``host_cupy``), and a tape stands in for the
stream capture: a kernel launched while the tape records is kept, not run, and ``launch()``
runs the kept kernels in order, as a graph launch does. So a recorded step, replayed with the
scalars put in its table before each launch, can be compared bit for bit with eager steps.
"""
import types

import numpy as np
import pytest

import needle as ndl
from needle.backend_ndarray import Device, NDArray
from needle.backend_ndarray.kernels import Scratch
from needle.backend_ndarray.kernels_cupy import CupyKernels
from needle.compiler import graph_update
from needle.compiler.graph_update import GraphUpdate
from needle.compiler.scalar_table import ScalarTable

from host_cupy import HostElementwiseKernel, compiler_available, host_cupy

pytestmark = pytest.mark.skipif(not compiler_available(), reason="no g++ to compile the kernels for the host")

SHAPES = [(3, 4), (4,), (2, 2, 2), (5, 1), (6,), (1,), (3, 3), (2,), (4, 2), (7,)]  # more than 8: two launches


class Tape:
    """Stands in for a capturing stream: kernels launched while ``recording`` are kept, in order."""

    def __init__(self):
        self.recording = False
        self.kernels = []

    def launch(self):
        for run in self.kernels:
            run()


def taped_cupy(tape):
    module = host_cupy()

    class TapedKernel(HostElementwiseKernel):
        def __call__(self, *args, size=None):
            if not tape.recording:
                return super().__call__(*args, size=size)
            # NOTE: as CuPy under capture: the outputs are allocated now, the kernel only recorded
            outputs = [p for p in self.params if p.is_output]
            if len(args) < len(self.params):
                bindings = self._bind(args)
                arrays = [a for p, a in zip(self.params, args) if not p.raw and isinstance(a, np.ndarray) and a.ndim]
                shape = (size,) if size is not None else np.broadcast_shapes(*(a.shape for a in arrays))
                args = args + tuple(np.zeros(shape, p.dtype(bindings)) for p in outputs)  # zeros: no overflow warnings
            tape.kernels.append(lambda: HostElementwiseKernel.__call__(self, *args, size=size))
            made = args[len(args) - len(outputs):]
            return made[0] if len(made) == 1 else made

    module.ElementwiseKernel = TapedKernel
    return module


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


# ---- capture_cuda end to end on the host ---------------------------------------------------
# A stand-in GPU: a device whose array module is numpy with the taped host-compiled kernels, and a
# stand-in CuPy whose stream records onto the tape while it captures. numpy's own operations run at
# once (the tape holds only the kernels), so a replay's values are not a step's: these check what
# capture_cuda puts in the plan and what a replay does before its launch, not the arithmetic.
class SettableArray(np.ndarray):
    """A numpy array with CuPy's ``set`` (the host-to-device copy the replays make)."""

    def set(self, host_array, stream=None):
        assert isinstance(stream, TapeStream), "copied on the stream the replay launches on"
        assert host_array.dtype == self.dtype and host_array.shape == self.shape
        self[...] = host_array


class TapeStream:
    current = None

    def __init__(self, tape=None, non_blocking=False):
        self.tape = tape or TapeStream.tape
        self.graphs = 0

    def begin_capture(self):
        self.tape.kernels.clear()
        self.tape.recording = True

    def end_capture(self):
        self.tape.recording = False
        self.graphs += 1
        return types.SimpleNamespace(launch=self.tape.launch)

    def is_capturing(self):
        return self.tape.recording

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def stand_in_gpu(tape):
    module = taped_cupy(tape)
    # NOTE: zeros where CuPy's are uninitialized: what the capture computes on them is never used
    module.empty = lambda *args, **kwargs: np.zeros(*args, **kwargs).view(SettableArray)
    gpu = Device("stand-in-gpu", module)
    TapeStream.tape = tape
    allocator = ["pool"]
    cuda = types.SimpleNamespace(
        Stream=TapeStream,
        set_allocator=allocator.append,
        get_allocator=lambda: allocator[-1],
        get_current_stream=lambda: TapeStream(tape),
        runtime=types.SimpleNamespace(CUDARuntimeError=type("CUDARuntimeError", (RuntimeError,), {})),
    )
    cupy = types.SimpleNamespace(cuda=cuda, get_default_memory_pool=lambda: types.SimpleNamespace(malloc=len))
    return gpu, cupy


def test_capture_cuda_puts_the_update_and_the_masks_in_one_graph(monkeypatch):
    import sys

    from needle import nn
    from needle.backend_ndarray import captured_gemm
    from needle.compiler import cuda_graph
    from needle.compiler.state import discover

    tape = Tape()
    gpu, cupy = stand_in_gpu(tape)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(captured_gemm, "CapturedGemm", lambda: np.matmul)
    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 8, device=gpu), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3, device=gpu))
    opt = ndl.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = nn.SoftmaxLoss()

    def step(x, y):
        opt.reset_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    rng = np.random.default_rng(0)
    x = ndl.Tensor(rng.standard_normal((5, 6)).astype(np.float32), device=gpu)
    y = ndl.Tensor(rng.integers(0, 3, 5), device=gpu, dtype="int64")
    entry = cuda_graph.capture_cuda(step, (x, y), {}, discover(step, (x, y), {}))
    assert opt.t == 1 and "step" not in vars(opt), "the eager call stepped; the capture only recorded"
    assert entry.segments.graphs == 1 and len(entry.segments.items) == 1, "one graph: no host call"
    assert [update.routine for update in entry.updates] == ["adam"]
    (mask_host, mask_buffer), = entry.host_uploads.uploads
    assert mask_buffer.shape == (5, 8) and mask_buffer.dtype == np.float32
    assert entry.ready()
    weight = model.modules[0].weight
    before = weight.numpy().copy()
    np.random.seed(9)
    expected_masks = [(np.random.rand(5, 8) <= 0.5).astype(np.float32) for _ in range(2)]
    np.random.seed(9)
    for replay in range(2):
        entry.replay((x, y), {})
        assert np.array_equal(mask_buffer, expected_masks[replay]), "a fresh mask, eager's draw"
        assert opt.t == 2 + replay and entry.updates[0].table.row.tolist() == [replay + 1]
    assert not np.array_equal(weight.numpy(), before), "the recorded update ran at the launches"
    opt.load_state_dict(opt.state_dict())
    assert not entry.ready(), "new moments: the graph would update the old ones"
