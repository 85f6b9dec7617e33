"""The CUDA graph replay's bookkeeping, with stand-ins for CuPy's stream and memory pool."""
import needle.compiler.cuda_graph as cuda_graph


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


def test_a_capture_that_falls_back_warns_once_and_runs_that_signature_eagerly(monkeypatch):
    """What CompiledFunction does with a CUDA capture that cannot be replayed (a Dropout mask
    uploaded from the host): the eager call's result, one warning, then eager calls."""
    import numpy as np
    import pytest

    import needle as ndl
    from needle.compiler import compiled as compiled_module
    from needle.compiler.errors import EagerFallback

    calls = []

    def step(x):
        calls.append(x.shape)
        return x * 2

    def capture_that_falls_back(fn, args, kwargs, state):
        result = fn(*args, **kwargs)  # the eager call a CUDA capture starts with
        raise EagerFallback("ndl.compile: this step uploads an array drawn on the host (a Dropout mask)", result.detach())

    monkeypatch.setattr(compiled_module, "is_cuda_argument", lambda args, kwargs: True)
    monkeypatch.setattr(compiled_module, "capture_cuda", capture_that_falls_back)
    compiled = ndl.compile(step)
    x = ndl.Tensor(np.array([1.0, 2.0], dtype=np.float32))
    with pytest.warns(ndl.EagerFallbackWarning, match="Dropout mask"):
        first = compiled(x)
    assert first.numpy().tolist() == [2.0, 4.0] and first.op is None  # the eager result, without a graph
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once: no second warning
        second = compiled(ndl.Tensor(np.array([3.0, 5.0], dtype=np.float32)))
    assert second.numpy().tolist() == [6.0, 10.0] and second.op is None
    assert len(calls) == 2 and compiled.captures == 1 and compiled.replays == 0


def test_restore_sets_every_slot_back():
    class Owner:
        pass

    owner = Owner()
    owner.weight, owner.grad = "replaced", "garbage"
    cuda_graph._restore([(owner, "weight", "kept"), (owner, "grad", None)])
    assert owner.weight == "kept" and owner.grad is None


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
    upload = cuda_graph.HostUpload("ndl.compile: this step uploads an array drawn on the host (a Dropout mask)")
    assert reason(upload, FakeCudaError) == str(upload)
    read = reason(FakeCudaError("operation not permitted when stream is capturing"), FakeCudaError)
    assert "operation not permitted" in read and "read it after the call" in read and "run eagerly" in read
    refused = reason(NotImplementedError("calling cuBLAS API during stream capture is currently unsupported"), FakeCudaError)
    assert "cannot record (calling cuBLAS API" in refused and "run eagerly" in refused
    other = reason(KeyError("hidden"), FakeCudaError)
    assert "raised KeyError: 'hidden'" in other and "eager run before had succeeded" in other
