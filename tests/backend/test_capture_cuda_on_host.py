"""``capture_cuda`` end to end on the host.

A stand-in GPU: a device whose array module is numpy with the taped host-compiled kernels
(``taped_cupy``), and a stand-in CuPy whose stream records onto the tape while it captures.
numpy's own operations run at once (the tape holds only the kernels), so a replay's values are not
a step's: this checks what ``capture_cuda`` puts in the plan and what a replay does before its
launch, not the arithmetic (``test_graph_update.py`` checks that).
"""
import types

import numpy as np
import pytest

import needle as ndl
from needle.backend_ndarray import Device

from host_cupy import compiler_available
from taped_cupy import Tape, taped_cupy

pytestmark = pytest.mark.skipif(not compiler_available(), reason="no g++ to compile the kernels for the host")


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


@pytest.fixture
def gpu(monkeypatch):
    """The stand-in GPU device, with the stand-in CuPy installed and needle's captured products
    made by numpy's matmul, for the test's duration."""
    import sys

    from needle.backend_ndarray import captured_gemm

    device, cupy = stand_in_gpu(Tape())
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(captured_gemm, "CapturedGemm", lambda: np.matmul)
    return device


def test_capture_cuda_puts_the_update_and_the_masks_in_one_graph(gpu):
    from needle import nn
    from needle.compiler import cuda_graph
    from needle.compiler.state import discover

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


def test_a_step_on_the_gpu_given_host_batches_runs_eagerly_and_says_how_to_replay_it(gpu):
    """A model on the GPU, a batch passed as a numpy array or a CPU Tensor and moved inside the
    step: a graph would upload the capture's batch at every launch, so the capture falls back
    (the eager result, once), naming the arguments and the fix."""
    from needle import nn
    from needle.compiler import cuda_graph
    from needle.compiler.errors import EagerFallback
    from needle.compiler.state import discover

    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 3, device=gpu))
    opt = ndl.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        opt.reset_grad()
        loss = nn.SoftmaxLoss()(model(ndl.Tensor(x, device=gpu)), ndl.Tensor(y, device=gpu, dtype="int64"))
        loss.backward()
        opt.step()
        return loss

    rng = np.random.default_rng(0)
    x = ndl.Tensor(rng.standard_normal((5, 6)).astype(np.float32))  # on the CPU
    y = rng.integers(0, 3, 5)  # numpy
    weight = model.modules[0].weight.numpy().copy()
    with pytest.raises(EagerFallback) as fallback:
        cuda_graph.capture_cuda(step, (x, y), {}, discover(step, (x, y), {}))
    assert "argument 0, 1 holds host data" in fallback.value.reason
    assert "x.to(ndl.cuda())" in fallback.value.reason
    assert not np.array_equal(model.modules[0].weight.numpy(), weight), "the eager call trained a step"
    assert np.isfinite(fallback.value.eager_result.numpy()).all()


def test_a_batch_in_a_tuple_is_copied_into_the_graphs_inputs_at_each_replay(gpu):
    from needle import nn
    from needle.compiler import cuda_graph
    from needle.compiler.state import discover

    np.random.seed(0)
    model = nn.Sequential(nn.Linear(6, 3, device=gpu))
    opt = ndl.optim.SGD(model.parameters(), lr=0.1)

    def step(batch):
        x, y = batch
        opt.reset_grad()
        loss = nn.SoftmaxLoss()(model(x), y)
        loss.backward()
        opt.step()
        return loss

    rng = np.random.default_rng(0)

    def batch():
        return (
            ndl.Tensor(rng.standard_normal((5, 6)).astype(np.float32), device=gpu),
            ndl.Tensor(rng.integers(0, 3, 5), device=gpu, dtype="int64"),
        )

    first = batch()
    entry = cuda_graph.capture_cuda(step, (first,), {}, discover(step, (first,), {}))
    assert entry.tensor_positions == [(0, 0), (0, 1)]
    second = batch()
    entry.replay((second,), {})
    assert np.array_equal(entry.input_buffers[0], second[0].numpy())
    assert np.array_equal(entry.input_buffers[1], second[1].numpy())
