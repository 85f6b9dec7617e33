"""One capture: run the step eagerly under a recorder, then keep its plan and what it expects.

The Tensor arguments are copied into buffers the plan owns and passed to the step as traced
constants. The state's arrays (parameters, running statistics, gradients) are traced views for
the duration, so every operation that touches them is recorded. Optimizer steps become host
calls. What the state looks like afterwards is what the next replay checks before it runs:
a parameter replaced between calls, or a changed ``.grad`` that the step accumulates into,
makes the call capture again instead of replaying stale buffers.
"""
import numpy

from .. import autograd
from ..backend_ndarray import NDArray
from ..tensor import Tensor
from .arguments import argument_at, is_input_array, map_inputs
from .errors import CaptureError, EagerFallback
from .flat_buffers import flatten_gradients, flatten_parameters
from .optimizer_replay import ReplayedStep, step_keeping_arrays
from .plan import Plan
from .recorder import Recorder, root
from .state import keep_replaced_tensors, slots_still_held
from .traced_array import TracedArray


class Capture:
    """A captured plan and the state it expects (one entry of a :class:`CompiledFunction`)."""

    replays_a_plan = True  # its calls count as replays (CompiledFunction.replays)
    attribute_writes = ()  # (owner, name, value) a call sets before its replay: what its capture set (CompiledFunction)

    def __init__(self, plan, tensor_positions, slots, outputs, last_result, any_input=False):
        self.plan = plan
        self.tensor_positions = tensor_positions  # the inputs' positions (needle.compiler.arguments)
        self.any_input = any_input  # whether some inputs are numpy arrays or inside containers
        self.slots = slots  # (owner, attribute, tensor, data, raw, reset): the state after capture
        self.outputs = outputs  # a template: Tensors replaced by ("output", buffer, device)
        self.last_result = last_result
        # (owner, attribute, tensor, data, raw): what must still be there for a replay (see ready)
        self.expected_slots = tuple((o, a, t, d, r) for o, a, t, d, r, reset in slots if not reset)
        self._fresh = tuple((o, a, t) for o, a, t, d, r, reset in slots if reset)

    def ready(self):
        """Whether the state is still the one captured (else the call must capture again)."""
        return slots_still_held(self.expected_slots)

    def replay(self, args, kwargs):
        for owner, attribute, tensor in self._fresh:
            setattr(owner, attribute, tensor)  # as backward() does: .grad is this step's gradient
        if kwargs or self.any_input:
            arrays = [_input_array(argument_at(args, kwargs, position)) for position in self.tensor_positions]
        else:
            arrays = [args[position].cached_data.raw for position in self.tensor_positions]
        plan = self.plan
        plan.replay(arrays)
        if autograd.LAZY_MODE:
            plan.finish()  # NOTE: a lazy graph realizes its leaves by their ops; a pending result has none
            return _rebuild(self.outputs)
        return _rebuild(self.outputs, plan)

    def outputs_of(self, result):
        """An eager call's result in the form a replay returns (Tensors without a graph)."""
        return _detached(result)


def capture_cpu(fn, args, kwargs, state):
    """Run ``fn`` once, recording; return its :class:`Capture`."""
    from ..optim.optimizer import Optimizer

    recorder = Recorder()
    input_buffers = []

    def traced_input(position, value):
        if is_input_array(value):  # a numpy batch: an input like a Tensor's array
            buffer = value.copy()
            recorder.know(buffer)
            input_buffers.append(buffer)
            return buffer.view(TracedArray)
        data = value.realize_cached_data()
        if not isinstance(data.raw, numpy.ndarray):
            raise CaptureError(
                f"ndl.compile: argument {position!r} is on {data.device}; this capture records numpy arrays "
                "(CUDA steps are captured by needle.compiler.cuda_graph)"
            )
        buffer = numpy.array(data.raw, copy=True)
        recorder.know(buffer)
        input_buffers.append(buffer)
        return Tensor.make_const(NDArray.wrap(buffer.view(TracedArray), data.device), requires_grad=value.requires_grad)

    traced_args, traced_kwargs, tensor_positions = map_inputs(args, kwargs, traced_input)

    flatten_parameters(state.optimizers)  # one flat buffer per optimizer and dtype: one update call
    swapped, before = {}, []
    for owner, attribute in state.slots:
        tensor = getattr(owner, attribute, None)
        raw = None
        if tensor is not None:
            data = tensor.realize_cached_data()
            if id(data) in swapped:  # NOTE: two slots may share one array (two biases' gradients after a + b)
                raw = swapped[id(data)][1]
            else:
                raw = data.raw
                if isinstance(raw, TracedArray):
                    raise CaptureError("ndl.compile: a tensor of the model is still traced from a failed capture")
                if data.__class__ is NDArray and raw.__class__ is numpy.ndarray:
                    swapped[id(data)] = (data, raw)
                    recorder.know(raw)
                    data.raw = raw.view(TracedArray)
        before.append((owner, attribute, tensor, tensor.cached_data if tensor is not None else None, raw))

    optimizers = {id(opt): opt for opt in state.optimizers}
    original_gradients = Optimizer._gradients_and_sources  # what every step reads its gradients through

    def checked_gradients(self, hand_over=True):
        if id(self) not in optimizers:
            raise CaptureError(
                f"ndl.compile: an optimizer that the compiled function does not reach through its arguments, "
                f"closure, globals or self ({type(self).__name__}) stepped during capture; pass it as an "
                f"argument or keep it in a global or closure variable so that its step can be replayed"
            )
        return original_gradients(self, hand_over)

    for opt in state.optimizers:
        opt.step = _host_step(recorder, opt)
    Optimizer._gradients_and_sources = checked_gradients
    recorder.start()
    backward_calls = autograd._BACKWARD_CALLS
    try:
        result = fn(*traced_args, **traced_kwargs)
    finally:
        recorder.stop()
        Optimizer._gradients_and_sources = original_gradients
        for opt in state.optimizers:
            opt.__dict__.pop("step", None)
        for data, raw in swapped.values():
            if isinstance(data.raw, TracedArray) and root(data.raw) is root(raw):
                data.raw = raw
        for owner, attribute in state.slots:
            _untrace(getattr(owner, attribute, None))

    needing = outputs_needing_graph(result) if autograd._BACKWARD_CALLS == backward_calls else ()
    if needing:
        # NOTE: the state as an eager call leaves it, in the tensors the signature was taken with
        keep_replaced_tensors([(o, a, t, d) for o, a, t, d, _ in before if a != "grad"])
        raise EagerFallback(graph_needed_reason(fn, needing), result, keeps_graph=True)
    results = set()
    outputs = _template(result, results)
    del result  # the eager graph: what the plan's steps alone hold is known to be theirs
    observed = set()
    protected = set(results)  # buffers the caller or the model can see besides the gradients
    for owner, attribute in state.slots:
        tensor = getattr(owner, attribute, None)
        if attribute != "grad" and tensor is not None and isinstance(tensor.cached_data, NDArray):
            protected.add(id(root(tensor.cached_data.raw)))
    flatten_gradients(recorder, state.optimizers, protected)
    slots, writebacks = [], []
    read = set().union(*(step.reads for step in recorder.steps)) if recorder.steps else set()
    for owner, attribute, tensor_before, data_before, raw_before in before:
        tensor = getattr(owner, attribute, None)
        data = tensor.cached_data if tensor is not None else None
        raw = data.raw if data is not None else None
        reads_before = raw_before is not None and id(root(raw_before)) in read
        replaced = raw is not None and raw_before is not None and root(raw) is not root(raw_before)
        if replaced and attribute != "grad":
            if raw.shape != raw_before.shape or raw.dtype != raw_before.dtype:
                raise CaptureError(
                    f"ndl.compile: {type(owner).__name__}.{attribute} changed from shape {raw_before.shape} "
                    f"{raw_before.dtype} to {raw.shape} {raw.dtype} during the step; a replay needs state of a fixed shape"
                )
            # NOTE: state the step replaces by a new tensor (BatchNorm's running statistics) keeps
            # its tensor: each replay copies the new values into it, so every plan of this function
            # sees the same state, and the signature does not change from call to call.
            # A tensor given a new array (``p.data = p.data - lr * p.grad``) keeps its array the same way.
            writebacks.append((raw, raw_before))
            setattr(owner, attribute, tensor_before)
            if tensor_before.cached_data is not data_before:
                tensor_before._replace_data(data_before)  # Plan() copies the capture's values in
            tensor, data, raw = tensor_before, data_before, raw_before
        elif replaced and reads_before:  # a gradient accumulated into: the next replay reads this one
            writebacks.append((raw, raw_before))
        if raw is not None and isinstance(raw, numpy.ndarray):
            observed.add(id(root(raw)))
        reset = attribute == "grad" and not reads_before  # a fresh gradient: backward() sets it every step
        slots.append((owner, attribute, tensor, data, raw, reset))
    private = (set(recorder.produced) | {id(buffer) for buffer in input_buffers}) - observed
    plan = Plan(
        recorder.steps, recorder.guards, input_buffers, observed, writebacks, set(recorder.known), results, private,
        buffers={**recorder.produced, **recorder.known, **{id(buffer): buffer for buffer in input_buffers}},
    )
    _mark_deferred(outputs, plan.deferred_outputs)
    any_input = any(
        type(position) is not int or is_input_array(argument_at(args, kwargs, position)) for position in tensor_positions
    )
    return Capture(plan, tensor_positions, slots, outputs, _rebuild(outputs), any_input)


def outputs_needing_graph(result, where="result"):
    """Where in ``result`` (``"result"``, ``"result[1]"``, ``"result['logits']"``) a Tensor needs
    its graph: it requires grad, reads a model's parameter, and no backward() has gone through
    it. Asked of a function that
    ran no backward() (a forward pass, whose backward the caller would run after the call); a
    replay returns values only, so that backward would reach nothing. (A training step's other
    results, a loss times the batch size, are values.)"""
    if isinstance(result, Tensor):
        needs = result.op is not None and result.requires_grad and result._spent is False and _reads_a_parameter(result)
        return [where] if needs else []
    if type(result) in (tuple, list) or (isinstance(result, tuple) and hasattr(result, "_fields")):
        return [w for index, item in enumerate(result) for w in outputs_needing_graph(item, f"{where}[{index}]")]
    if type(result) is dict:
        return [w for key, item in result.items() for w in outputs_needing_graph(item, f"{where}[{key!r}]")]
    return []


def _reads_a_parameter(tensor):
    """Whether a ``Parameter`` (a model's weight) is among the leaves of ``tensor``'s graph: a
    forward through a model, not arithmetic on plain tensors (which require grad by default)."""
    stack, seen = [tensor], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.op is None:
            if node._is_parameter:
                return True
            continue
        stack.extend(node.inputs)
    return False


def graph_needed_reason(fn, where):
    """The warning of a step whose results need their graph (:func:`outputs_needing_graph`)."""
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return (
        f"ndl.compile: {name} runs no backward() and returns a tensor that requires grad "
        f"({', '.join(where)}). A replay returns values without a graph, so a backward() "
        f"after the call could not reach the parameters: calls with this signature run eagerly. "
        f"ndl.compile captures whole training steps: call loss.backward() and opt.step() inside the "
        f"compiled function; to evaluate, run the forward under ndl.no_grad()"
    )


def _host_step(recorder, opt):
    step = step_keeping_arrays(opt)

    def host_step():
        recorder.host_call(step, lambda: _optimizer_arrays(opt), replay=ReplayedStep(opt))

    return host_step


def _optimizer_arrays(opt):
    arrays = []
    for param in opt.params:
        for tensor in (param, param.grad):
            if tensor is not None and tensor.cached_data is not None:
                arrays.append(tensor.cached_data.raw)
    return arrays


def _untrace(tensor):
    if tensor is None or tensor.cached_data is None:
        return
    data = tensor.cached_data
    if isinstance(data, NDArray) and isinstance(data.raw, TracedArray):
        data.raw = data.raw.view(numpy.ndarray)


def _input_array(value):
    return value if value.__class__ is numpy.ndarray else value.cached_data.raw


def _template(value, observed):
    if isinstance(value, Tensor):
        data = value.realize_cached_data()
        raw = data.raw.view(numpy.ndarray) if isinstance(data.raw, TracedArray) else data.raw
        observed.add(id(root(raw)))
        return _Output(raw, data.device)
    if type(value) in (tuple, list):
        return type(value)(_template(item, observed) for item in value)
    if type(value) is dict:
        return {key: _template(item, observed) for key, item in value.items()}
    return value


class _Output:
    __slots__ = ("buffer", "device", "deferred")

    def __init__(self, buffer, device):
        self.buffer, self.device = buffer, device
        self.deferred = False  # whether a deferred step of the plan writes it


def _mark_deferred(template, deferred_roots):
    if template.__class__ is _Output:
        template.deferred = id(root(template.buffer)) in deferred_roots
    elif type(template) in (tuple, list):
        for item in template:
            _mark_deferred(item, deferred_roots)
    elif type(template) is dict:
        for item in template.values():
            _mark_deferred(item, deferred_roots)


def _rebuild(template, plan=None):
    """The results a call returns: copies of the output buffers (pending results of ``plan``
    for those its deferred steps write)."""
    if template.__class__ is _Output:
        if template.deferred and plan is not None:
            return plan.pending(template.buffer, template.device)
        return Tensor.make_const(NDArray.wrap(template.buffer.copy(), template.device))
    if type(template) in (tuple, list):
        return type(template)(_rebuild(item, plan) for item in template)
    if type(template) is dict:
        return {key: _rebuild(item, plan) for key, item in template.items()}
    return template


def _detached(value):
    if isinstance(value, Tensor):
        return value.detach()
    if type(value) in (tuple, list):
        return type(value)(_detached(item) for item in value)
    if type(value) is dict:
        return {key: _detached(item) for key, item in value.items()}
    return value
