"""CUDA replay: a captured step as CUDA graph launches (CuPy stream capture).

On a GPU the step runs once eagerly under ``stream.begin_capture()``: CuPy's kernels are recorded
into a graph instead of running, and every buffer allocated meanwhile is kept alive for the
graph's lifetime (:class:`KeptAllocations`). An SGD or Adam step is recorded into the graph too,
as update kernels that read their scalars on the device (:mod:`needle.compiler.graph_update`):
before each launch the host reads ``opt.lr`` and the step count as the eager step does and
puts the scalars where those kernels read them. An array the step uploads from the host (a
Dropout mask, drawn with numpy's RNG) gets a device buffer of its own, and before each launch the
host redraws it and copies it in (:mod:`needle.compiler.host_uploads`). A replay copies the
inputs into the captured input buffers and launches one graph on the caller's current stream.
Any other optimizer's step ends one graph and starts the next (:class:`GraphSegments`) and runs
as a host call.

The first call runs the step eagerly (it also makes lazily made state: optimizer moments, CuPy's
compiled kernels), then captures it. What a CUDA graph cannot hold is found there: a value read
to the host (CuPy refuses a synchronising copy during capture), a library call CuPy refuses
while capturing. The step has already run correctly, so the call returns its eager result,
every slot of the model and optimizers is set back to what the eager call left,
:class:`EagerFallbackWarning` says why once, and calls with that signature run eagerly. (On the CPU, where the capture is the eager
call, a value read to the host raises :class:`CaptureError` instead.)

CuPy refuses every cuBLAS call during a capture, so while one runs, needle's matrix products
(:mod:`needle.backend_ndarray.products`) make CuPy's own GEMM call directly
(:class:`~needle.backend_ndarray.captured_gemm.CapturedGemm`), which the graph records.

Without a GPU this module imports and its bookkeeping is tested with stand-ins for the stream
and the memory pool; ``benchmarks/gpu_check.sh`` measures it on a GPU.
"""

import numpy

from ..backend_ndarray.captured_gemm import NotCapturable
from .arguments import argument_at, inputs_of, map_inputs
from .errors import EagerFallback
from .optimizer_replay import step_keeping_arrays
from .state import keep_replaced_tensors, read_slots, slots_still_held


class KeptAllocations:
    """Within the block, every device allocation is kept (never returned to the pool).

    A graph bakes the addresses it was captured with; a buffer freed during capture and handed
    to another array later would be overwritten by every replay. ``kept`` holds them all.

    Args:
        malloc: the pool's allocation function (``cupy.get_default_memory_pool().malloc``).
        set_allocator: the function that installs an allocator (``cupy.cuda.set_allocator``).
        current_allocator: returns the allocator to restore (``cupy.cuda.get_allocator``).
    """

    def __init__(self, malloc, set_allocator, current_allocator):
        self._malloc, self._set, self._current = malloc, set_allocator, current_allocator
        self.kept = []
        self._saved = None

    def allocate(self, size):
        memory = self._malloc(size)
        self.kept.append(memory)
        return memory

    def __enter__(self):
        self._saved = self._current()
        self._set(self.allocate)
        return self

    def __exit__(self, *exc):
        self._set(self._saved)
        return False


class GraphSegments:
    """Stream capture split at host calls: the replay items of one capture, in order.

    ``begin()`` starts capturing; ``host_call(fn)`` ends the current graph, records ``fn`` (it
    runs at each replay, not now: the kernels before it have only been recorded) and starts the
    next graph; ``end()`` closes the last one. ``items`` are callables: graph launches and the
    host calls, both on the stream current at the replay (the caller's, usually CuPy's default),
    so a replay is ordered after the kernels that made its inputs and before those that read its
    results, as an eager step is; ``stream`` only records.
    """

    def __init__(self, stream):
        self.stream = stream
        self.items = []
        self.graphs = 0

    def begin(self):
        self.stream.begin_capture()

    def _close(self):
        graph = self.stream.end_capture()
        self.graphs += 1
        self.items.append(graph.launch)

    def host_call(self, function):
        self._close()
        self.items.append(function)
        self.begin()

    def end(self):
        self._close()

    def abort(self):
        """End a capture that failed part-way (the partial graph is discarded)."""
        try:
            capturing = self.stream.is_capturing()
        except Exception:  # NOTE: CuPy raises for an invalidated capture, which still has to be ended
            capturing = True
        if capturing:
            try:
                self.stream.end_capture()
            except Exception:  # ending an invalidated capture reports it; the stream is back to normal
                pass

    def replay(self):
        for item in self.items:
            item()


class CudaGraphCapture:
    """A step captured as graph segments, with the input buffers it copies new inputs into.

    ``slots`` are the state's (owner, attribute) pairs, read after the capture: the gradients a
    replay's graphs write are given back to their parameters before each replay (another plan of
    the same function may have set others, as backward() sets ``.grad`` every step), and every
    other tensor must still be the one captured, with the same array (a parameter replaced by
    ``p.data = ...`` or ``load_state_dict`` makes the call capture again instead of replaying
    buffers the model no longer uses).
    """

    replays_a_plan = True
    attribute_writes = ()  # (owner, name, value) a call sets before its replay: what its capture set (CompiledFunction)

    def __init__(
        self, segments, allocations, tensor_positions, input_buffers, outputs, last_result, slots, updates=(),
        host_uploads=None,
    ):
        self.segments = segments
        self.host_uploads = host_uploads  # the HostUploads redrawn before each launch (Dropout masks), or None
        self.updates = tuple(updates)  # the GraphUpdates recorded, in the order the step ran them
        self.ready_checks = tuple(update.ready for update in self.updates)  # the repeat guard calls them too
        self.allocations = allocations  # keeps the graphs' buffers alive
        self.tensor_positions = tensor_positions
        self.input_buffers = input_buffers
        self.outputs = outputs
        self.last_result = last_result
        held = [(owner, name, getattr(owner, name, None)) for owner, name in slots]
        self.gradients = tuple((owner, tensor) for owner, name, tensor in held if name == "grad" and tensor is not None)
        self.expected_slots = tuple(
            (owner, name, tensor, _data(tensor), _raw(tensor)) for owner, name, tensor in held if name != "grad"
        )

    def ready(self):
        """Whether the model, and each optimizer updated in the graph, still hold the tensors and
        arrays the graphs were captured with."""
        return slots_still_held(self.expected_slots) and all(check() for check in self.ready_checks)

    def replay(self, args, kwargs):
        from .capture import _rebuild

        for parameter, gradient in self.gradients:
            parameter.grad = gradient  # the arrays this plan's graphs write
        # NOTE: on the current stream, not the capture's: a side stream would race the kernels
        # that made the inputs (CuPy's default stream does not wait for a non-blocking one).
        for buffer, position in zip(self.input_buffers, self.tensor_positions):
            source = argument_at(args, kwargs, position)
            buffer[...] = source if isinstance(source, numpy.ndarray) else source.cached_data.raw
        if self.host_uploads is not None:
            self.host_uploads.before_launch()
        for update in self.updates:
            update.before_launch()
        self.segments.replay()
        return _rebuild(self.outputs)


def _data(tensor):
    return None if tensor is None else tensor.cached_data


def _raw(tensor):
    return None if tensor is None or tensor.cached_data is None else tensor.cached_data.raw


def capture_cuda(fn, args, kwargs, state):  # pragma: no cover - needs a GPU (benchmarks/gpu_check.sh)
    """Run ``fn`` once under CUDA stream capture; return its :class:`CudaGraphCapture`."""
    import cupy

    from ..backend_ndarray import NDArray, cpu, products
    from ..backend_ndarray.captured_gemm import CapturedGemm
    from ..backend_ndarray.device import Device
    from ..tensor import Tensor
    from .. import autograd
    from .capture import _detached, _template, graph_needed_reason, outputs_needing_graph
    from .graph_update import GraphUpdate
    from .host_uploads import HostUploads

    input_buffers = []

    def device_input(position, value):
        if isinstance(value, numpy.ndarray):  # (a host array where nothing lives on a GPU: a stand-in's)
            buffer = value.copy()
            input_buffers.append(buffer)
            return buffer
        data = value.realize_cached_data()
        buffer = data.raw.copy()
        input_buffers.append(buffer)
        return Tensor.make_const(NDArray.wrap(buffer, data.device), requires_grad=value.requires_grad)

    # NOTE: this call's step runs eagerly; it also makes lazily made state (optimizer moments,
    # compiled kernels) before the capture, which records a step without running it.
    state_before = read_slots([(owner, name) for owner, name in state.slots if name != "grad"])
    backward_calls = autograd._BACKWARD_CALLS
    eager_result = fn(*args, **kwargs)
    keep_replaced_tensors(state_before)  # the attributes the plan's signature was taken with
    needing = outputs_needing_graph(eager_result) if autograd._BACKWARD_CALLS == backward_calls else ()
    if needing:  # a forward whose backward the caller runs: it needs the graph a replay has not
        raise EagerFallback(graph_needed_reason(fn, needing), eager_result, keeps_graph=True)
    on_host = host_arguments(args, kwargs) if _state_off_host(state) or is_cuda_argument(args, kwargs) else ()
    if on_host:
        # NOTE: a graph would upload the capture's copy of a host batch at every launch
        raise EagerFallback(
            f"ndl.compile: the step runs on CUDA but its argument {', '.join(map(repr, on_host))} holds host "
            f"data (a numpy array or a CPU Tensor), which a CUDA graph would upload as captured at every "
            f"launch, so calls with this signature run eagerly. Move the batch to the GPU before the call "
            f"(x.to(ndl.cuda()), or ndl.Tensor(x, device=ndl.cuda())) to have them replayed",
            _detached(eager_result),
        )
    device_args, device_kwargs, tensor_positions = map_inputs(args, kwargs, device_input)  # host inputs fell back above
    stream = cupy.cuda.Stream(non_blocking=True)
    segments = GraphSegments(stream)
    pool = cupy.get_default_memory_pool()
    allocations = KeptAllocations(pool.malloc, cupy.cuda.set_allocator, cupy.cuda.get_allocator)

    def upload(device_array, host_array):  # at a replay: on the stream it launches on
        device_array.set(host_array, stream=cupy.cuda.get_current_stream())

    host_uploads = HostUploads(upload, Device, cpu())
    after_eager = read_slots(state.slots)
    random_state = numpy.random.get_state()  # the capture's draws (a Dropout mask) are not eager's
    try:
        gemm = CapturedGemm()
    except NotCapturable as error:
        raise EagerFallback(
            f"ndl.compile: {error}, so calls with this signature run eagerly", _detached(eager_result)
        ) from None
    updates = []
    for opt in state.optimizers:
        step = step_keeping_arrays(opt)
        opt.step = lambda opt=opt, step=step: _record_step(GraphUpdate.record, opt, step, segments, updates, upload)
    try:
        # NOTE: CuPy refuses cuBLAS while a stream captures: this thread's products call it directly
        with products.capturing(gemm), allocations, stream:
            segments.begin()
            try:
                with host_uploads:
                    result = fn(*device_args, **device_kwargs)
                if host_uploads.guards:
                    raise NotCapturable("needle checked a value drawn on the host, which a replay would not check again")
                keep_replaced_tensors(state_before)  # recorded: each replay copies the new values back
                segments.end()
            except Exception as error:
                segments.abort()
                _restore(after_eager)
                raise EagerFallback(
                    _fallback_reason(error, cupy.cuda.runtime.CUDARuntimeError), _detached(eager_result)
                ) from None
            except BaseException:  # KeyboardInterrupt: the capture is abandoned, the state kept
                segments.abort()
                _restore(after_eager)
                raise
    except products.ConcurrentCapture as error:
        raise EagerFallback(f"{error}, so calls with this signature run eagerly", _detached(eager_result)) from None
    finally:
        numpy.random.set_state(random_state)
        for opt in state.optimizers:
            opt.__dict__.pop("step", None)
    outputs = _template(result, set())
    return CudaGraphCapture(
        segments, allocations, tensor_positions, input_buffers, outputs, _detached(eager_result), state.slots, updates,
        host_uploads if host_uploads.uploads else None,
    )


def _record_step(record, opt, step, segments, updates, upload):
    """``opt.step()`` while a step is captured: recorded into the graph (``record`` gives its
    GraphUpdate), or, where it cannot be, a host call that ends the graph and starts the next."""
    update = record(opt, upload)
    if update is None:
        segments.host_call(step)
    else:
        updates.append(update)


def _fallback_reason(error, cuda_error):
    """Why a step that ran eagerly could not be captured, and what to do, for the one warning
    (``cuda_error``: CuPy's ``CUDARuntimeError``)."""
    eager = "so calls with this signature run eagerly, with the same values"
    if isinstance(error, cuda_error) or (isinstance(error, RuntimeError) and "capturing" in str(error)):
        # NOTE: CuPy refuses a device-to-host copy on a capturing stream with a RuntimeError
        return (
            f"ndl.compile: the step waited for the GPU while it was being captured as a CUDA graph ({error}), "
            f"{eager}. If it reads a tensor's value (float(loss), loss.numpy(), if loss > 0:), return the "
            f"tensor and read it after the call"
        )
    if isinstance(error, (NotImplementedError, NotCapturable)):
        return f"ndl.compile: this step makes a call that a CUDA graph cannot record ({error}), {eager}"
    return (
        f"ndl.compile: the step raised {type(error).__name__}: {error} while being captured as a CUDA graph "
        f"(its eager run before had succeeded), {eager}"
    )


def _restore(slots):
    """Set each (owner, attribute, tensor, array) of :func:`read_slots` back: a failed capture
    leaves the eager call's state."""
    for owner, name, tensor, data in slots:
        setattr(owner, name, tensor)
        if tensor is not None and tensor.cached_data is not data:
            tensor._replace_data(data)


def holds_cuda_state(state):
    """Whether a tensor of the step's state (a model's parameter) lives on a CUDA device: such a
    step is a CUDA capture even when its arguments are host data."""
    for owner, attribute in state.slots:
        tensor = getattr(owner, attribute, None)
        data = tensor.cached_data if tensor is not None else None
        if data is not None and hasattr(data, "raw") and not isinstance(data.raw, numpy.ndarray):
            return True
    return False


def _state_off_host(state):
    """Whether a tensor of the state lives on a device other than the CPU."""
    for owner, attribute in state.slots:
        tensor = getattr(owner, attribute, None)
        data = tensor.cached_data if tensor is not None else None
        if data is not None and getattr(getattr(data, "device", None), "name", "cpu") != "cpu":
            return True
    return False


def host_arguments(args, kwargs):
    """The positions (:mod:`needle.compiler.arguments`) of the inputs that hold host data: numpy
    arrays and Tensors on the CPU."""
    found = []
    for position, value in inputs_of(args, kwargs):
        if isinstance(value, numpy.ndarray) or value.realize_cached_data().device.name == "cpu":
            found.append(position)
    return found


def is_cuda_argument(args, kwargs):
    """Whether any Tensor argument (also inside a tuple, list or dict) lives on a CUDA device."""
    for _, value in inputs_of(args, kwargs):
        if not isinstance(value, numpy.ndarray) and not isinstance(value.realize_cached_data().raw, numpy.ndarray):
            return True
    return False
