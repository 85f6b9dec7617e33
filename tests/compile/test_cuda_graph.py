"""The CUDA graph replay's bookkeeping, with stand-ins for CuPy's stream and memory pool."""
import needle.compiler.cuda_graph as cuda_graph


class FakeGraph:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def launch(self, stream):
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
    step = [("launch", "graph1", stream), ("host", "optimizer step"), ("launch", "graph2", stream)]
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
