"""The CUDA graph replay's bookkeeping, with stand-ins for CuPy's stream and memory pool."""
import needle.compiler.cuda_graph as cuda_graph

from steps import step_function


class FakeGraph:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def launch(self, stream=None):
        self.log.append(("launch", self.name, stream))


class FakeStream:
    def __init__(self):
        self.log, self.capturing, self.count = [], False, 0

    def begin_capture(self):
        assert not self.capturing, "capture begun twice"
        self.capturing = True

    def end_capture(self):
        assert self.capturing, "capture ended without a begin"
        self.capturing = False
        self.count += 1
        return FakeGraph(self.log, f"graph{self.count}")

    def is_capturing(self):
        return self.capturing


def test_host_calls_split_the_capture_and_replay_in_order_without_running_at_capture():
    stream = FakeStream()
    segments = cuda_graph.GraphSegments(stream)
    segments.begin()
    segments.host_call(lambda: stream.log.append(("host", "optimizer step")))
    segments.end()
    assert stream.log == []  # nothing ran while capturing
    assert segments.graphs == 2 and not stream.capturing
    segments.replay()
    segments.replay()
    # launched on the current stream (no stream argument), not on the stream that captured them
    step = [("launch", "graph1", None), ("host", "optimizer step"), ("launch", "graph2", None)]
    assert stream.log == step + step


def test_an_aborted_capture_ends_the_stream_capture():
    stream = FakeStream()
    segments = cuda_graph.GraphSegments(stream)
    segments.begin()
    segments.abort()
    assert not stream.capturing
    segments.abort()  # nothing to end: no error


def test_allocations_made_in_the_block_are_kept_and_the_allocator_restored():
    installed = ["pool allocator"]
    made = []

    def malloc(size):
        made.append(size)
        return f"memory of {size}"

    kept = cuda_graph.KeptAllocations(malloc, installed.append, lambda: installed[-1])
    with kept:
        allocator = installed[-1]
        assert allocator(16) == "memory of 16" and allocator(32) == "memory of 32"
    assert kept.kept == ["memory of 16", "memory of 32"] and made == [16, 32]
    assert installed[-1] == "pool allocator"


def test_numpy_arguments_are_not_cuda_arguments():
    import numpy as np

    import needle as ndl

    assert not cuda_graph.is_cuda_argument((ndl.Tensor(np.ones(2)), 3), {"y": ndl.Tensor(np.ones(1))})


def test_restore_sets_every_slot_and_array_back():
    import numpy as np

    import needle as ndl

    class Owner:
        pass

    owner = Owner()
    kept, updated = ndl.Tensor(np.ones(2)), ndl.Tensor(np.zeros(3))
    updated_array = updated.cached_data
    owner.weight, owner.bias, owner.grad = ndl.Tensor(np.full(2, 5.0)), updated, "garbage"
    updated.data = ndl.Tensor(np.full(3, 7.0))  # the failed capture gave it a new array
    cuda_graph._restore(
        [(owner, "weight", kept, kept.cached_data), (owner, "bias", updated, updated_array), (owner, "grad", None, None)]
    )
    assert owner.weight is kept and owner.bias is updated and owner.grad is None
    assert updated.cached_data is updated_array and updated.numpy().tolist() == [0.0, 0.0, 0.0]


class InvalidatedStream(FakeStream):
    """A capture an error invalidated: CuPy's is_capturing and end_capture both raise."""

    def is_capturing(self):
        if self.capturing:
            raise RuntimeError("the capture sequence has been invalidated")
        return False

    def end_capture(self):
        if not self.capturing:
            raise AssertionError("ended twice")
        self.capturing = False
        raise RuntimeError("cudaErrorStreamCaptureInvalidated")


def test_aborting_an_invalidated_capture_ends_it_without_raising():
    stream = InvalidatedStream()
    segments = cuda_graph.GraphSegments(stream)
    segments.begin()
    segments.abort()
    assert not stream.capturing


class FakeCudaError(Exception):
    pass


def test_each_kind_of_capture_failure_gets_its_own_reason_and_fix():
    reason = cuda_graph._fallback_reason
    read = reason(FakeCudaError("operation not permitted when stream is capturing"), FakeCudaError)
    assert "operation not permitted" in read and "read it after the call" in read and "run eagerly" in read
    refused = reason(NotImplementedError("calling cuBLAS API during stream capture is currently unsupported"), FakeCudaError)
    assert "cannot record (calling cuBLAS API" in refused and "run eagerly" in refused
    other = reason(KeyError("hidden"), FakeCudaError)
    assert "raised KeyError: 'hidden'" in other and "eager run before had succeeded" in other


# ---- capture_cuda's bookkeeping, run on the CPU with a stand-in for CuPy --------------------
# The stand-in's stream runs every kernel at once (nothing is recorded), so these tests check what
# capture_cuda does around the capture (state kept, gradients, slots, failures), not the graphs;
# benchmarks/gpu_check.sh runs tests/compile/test_cuda_replay.py for those on a GPU.
class StandInStream(FakeStream):
    def __init__(self, non_blocking=False):
        super().__init__()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _stand_in_cupy():
    import types

    class CUDARuntimeError(RuntimeError):
        pass

    pool = types.SimpleNamespace(malloc=lambda size: ("memory", size))
    allocator = ["pool"]
    cuda = types.SimpleNamespace(
        Stream=StandInStream,
        set_allocator=allocator.append,
        get_allocator=lambda: allocator[-1],
        runtime=types.SimpleNamespace(CUDARuntimeError=CUDARuntimeError),
    )
    return types.SimpleNamespace(cuda=cuda, get_default_memory_pool=lambda: pool)


class NumpyProduct:
    def __call__(self, a, b):
        return a @ b


def _capture_with_stand_ins(monkeypatch, fn, args, cupy=None):
    import sys

    from needle.backend_ndarray import captured_gemm
    from needle.compiler.state import discover

    monkeypatch.setitem(sys.modules, "cupy", cupy or _stand_in_cupy())
    monkeypatch.setattr(captured_gemm, "CapturedGemm", NumpyProduct)
    state = discover(fn, args, {})
    return cuda_graph.capture_cuda(fn, args, {}, state), state


def _batch_norm_step():
    import numpy as np

    import needle as ndl
    import needle.nn as nn

    np.random.seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3))
    opt = ndl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = step_function(model, opt)
    rng = np.random.default_rng(1)
    x = ndl.Tensor(rng.normal(size=(8, 4)).astype(np.float32))
    y = ndl.Tensor(rng.integers(0, 3, 8))
    return model, opt, step, (x, y)


def test_a_capture_keeps_the_model_attributes_and_gives_each_replay_its_gradients(monkeypatch):
    import numpy as np

    model, opt, step, args = _batch_norm_step()
    norm = model.modules[1]
    running_mean = norm.running_mean
    before = running_mean.numpy().copy()
    entry, state = _capture_with_stand_ins(monkeypatch, step, args)
    assert norm.running_mean is running_mean  # the same tensor (the signature's), holding new values
    assert not np.array_equal(norm.running_mean.numpy(), before)
    assert "step" not in vars(opt)  # the optimizer's own step again
    gradients = dict((id(p), g) for p, g in entry.gradients)
    assert sorted(gradients) == sorted(id(p) for p in model.parameters())
    assert entry.ready()
    for parameter in model.parameters():
        parameter.grad = None  # as another plan's replay or reset_grad() leaves them
    entry.replay(args, {})
    assert all(p.grad is gradients[id(p)] for p in model.parameters())
    assert entry.segments.graphs == 2  # split at the optimizer step
    weight = model.modules[0].weight
    weight.data = weight.data + 0  # replaced: the graphs would read the old array
    assert not entry.ready()


def test_a_capture_that_fails_sets_every_slot_back_and_keeps_the_random_state(monkeypatch):
    import numpy as np
    import pytest

    from needle.compiler.errors import EagerFallback

    model, opt, step, args = _batch_norm_step()
    calls, eager = [], {}

    def step_that_fails_when_captured(x, y):
        calls.append(np.random.rand())  # a draw: the capture's must not count
        loss = step(x, y)
        if len(calls) == 1:
            eager["grads"] = [p.grad for p in model.parameters()]
            eager["running_mean"] = model.modules[1].running_mean
        else:
            raise KeyError("only while capturing")
        return loss

    original_mean = model.modules[1].running_mean
    np.random.seed(7)
    with pytest.raises(EagerFallback) as failure:
        _capture_with_stand_ins(monkeypatch, step_that_fails_when_captured, args)
    next_draw = np.random.rand()
    np.random.seed(7)
    np.random.rand()  # the eager call's one draw
    assert next_draw == np.random.rand()
    assert "raised KeyError" in failure.value.reason and failure.value.eager_result.op is None
    assert "step" not in vars(opt)
    assert all(p.grad is g for p, g in zip(model.parameters(), eager["grads"]))
    # the tensor the model had, holding the eager call's new statistics (as after every call)
    assert model.modules[1].running_mean is original_mean
    np.testing.assert_array_equal(original_mean.numpy(), eager["running_mean"].numpy())


def test_a_capture_whose_last_graph_cannot_be_ended_falls_back_with_the_eager_state(monkeypatch):
    import pytest

    from needle.compiler.errors import EagerFallback

    class LastEndFails(StandInStream):
        def end_capture(self):
            graph = super().end_capture()
            if self.count == 2:  # the graph after the optimizer step: the capture was invalidated
                raise RuntimeError("cudaErrorStreamCaptureInvalidated")
            return graph

    model, opt, step, args = _batch_norm_step()
    eager = {}

    def step_keeping_the_eager_gradients(x, y):
        loss = step(x, y)
        eager.setdefault("grads", [p.grad for p in model.parameters()])
        return loss

    cupy = _stand_in_cupy()
    cupy.cuda.Stream = LastEndFails
    with pytest.raises(EagerFallback, match="raised RuntimeError: cudaErrorStreamCaptureInvalidated"):
        _capture_with_stand_ins(monkeypatch, step_keeping_the_eager_gradients, args, cupy)
    assert all(p.grad is g for p, g in zip(model.parameters(), eager["grads"]))
    assert "step" not in vars(opt)


# ---- the optimizer step inside the graph ---------------------------------------------------
class FakeUpdate:
    def __init__(self, log, name, ready=True):
        self.log, self.name, self.is_ready = log, name, ready

    def ready(self):
        return self.is_ready

    def before_launch(self):
        self.log.append(("before launch", self.name))


def test_a_recorded_step_stays_in_the_graph_and_others_are_host_calls():
    stream = FakeStream()
    segments = cuda_graph.GraphSegments(stream)
    updates = []
    host_steps = []
    segments.begin()
    cuda_graph._record_step(lambda opt, upload: FakeUpdate(stream.log, opt), "sgd", None, segments, updates, None)
    assert segments.graphs == 0 and [u.name for u in updates] == ["sgd"], "recorded: the capture goes on"
    cuda_graph._record_step(lambda opt, upload: None, "custom", lambda: host_steps.append(1), segments, updates, None)
    segments.end()
    assert segments.graphs == 2 and len(updates) == 1, "not recordable: a host call between two graphs"
    segments.replay()
    assert host_steps == [1]


def test_a_replay_puts_each_updates_scalars_in_place_before_its_one_launch():
    stream = FakeStream()
    segments = cuda_graph.GraphSegments(stream)
    segments.begin()
    segments.end()
    first, second = FakeUpdate(stream.log, "first"), FakeUpdate(stream.log, "second")
    entry = cuda_graph.CudaGraphCapture(segments, None, [], [], None, None, [], [first, second])
    assert entry.ready()
    assert entry.replay((), {}) is None
    assert stream.log == [("before launch", "first"), ("before launch", "second"), ("launch", "graph1", None)]
    second.is_ready = False  # its optimizer no longer holds the arrays the graph updates
    assert not entry.ready()


def test_the_repeat_guard_asks_the_plans_own_checks_too():
    import numpy as np

    import needle as ndl
    from needle.compiler.repeat_guard import repeat_guard
    from needle.compiler.state import StepState

    update = FakeUpdate([], "sgd")
    entry = cuda_graph.CudaGraphCapture(cuda_graph.GraphSegments(FakeStream()), None, [], [], None, None, [], [update])
    args = (ndl.Tensor(np.ones(2, dtype=np.float32)),)
    guard = repeat_guard(args, StepState([], []), entry)
    assert guard(args)
    update.is_ready = False
    assert not guard(args)


def test_a_model_on_cuda_makes_a_cuda_capture_even_with_host_arguments():
    """A step whose batch arrives as numpy or CPU Tensors but whose model is on the GPU must not
    go to the CPU capture, which records numpy operations only (it would replay nothing of the
    GPU's work): its state decides."""
    import types

    import numpy as np

    import needle as ndl
    from needle.backend_ndarray import NDArray

    class DeviceArray:  # anything but a numpy array, as CuPy's are
        shape, dtype = (2,), np.dtype("float32")

    on_gpu = ndl.Tensor(np.ones(2, np.float32))
    on_gpu.cached_data = NDArray.wrap(DeviceArray(), on_gpu.device)
    holder = types.SimpleNamespace(weight=on_gpu, bias=ndl.Tensor(np.ones(2, np.float32)))
    assert cuda_graph.holds_cuda_state(types.SimpleNamespace(slots=[(holder, "bias"), (holder, "weight")]))
    assert not cuda_graph.holds_cuda_state(types.SimpleNamespace(slots=[(holder, "bias"), (holder, "missing")]))
