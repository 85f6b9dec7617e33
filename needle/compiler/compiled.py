"""``ndl.compile``: capture a training step once per signature, then replay it."""
import functools
import types
import warnings

import numpy

from ..grad_mode import GRAD_MODE
from ..backend_ndarray import products
from . import traced_array
from .arguments import argument_key as _argument_key
from .assignment_watch import AssignmentWatch
from .capture import _detached, capture_cpu
from .cuda_graph import capture_cuda, holds_cuda_state, is_cuda_argument
from .eager_entry import EagerEntry
from .errors import CaptureError, EagerFallback, EagerFallbackWarning, RecaptureWarning
from .plan import ReplayMismatch
from .recorder import redrawn
from .repeat_guard import repeat_guard
from .state import adopt_replacements, discover, hyperparameters


def compile(fn=None, **options):
    """Capture ``fn`` (a training step) once per signature and replay it as a static plan.

    The first call with a new signature (the shapes, dtypes, devices and ``requires_grad`` of the
    Tensor arguments, the shapes and dtypes of numpy-array arguments, which are inputs too (also
    inside tuple, list and dict arguments: :mod:`needle.compiler.arguments`), the
    other arguments' values, whether gradients are enabled, the objects behind the global names
    and closure variables ``fn`` reads (:mod:`needle.compiler.sources`), and every
    attribute of the models the function reaches, ``training`` included) runs ``fn`` eagerly while recording each array operation of
    the forward, the backward and the update. Later calls with that signature replay the
    recording: the inputs are copied into buffers allocated at capture and each operation runs
    in place (``out=``), with no graph node and no op dispatch. Optimizer steps run as host
    calls at their place in the replay, so ``opt.lr`` changes, Adam's step count and a loaded
    state dict take effect. Dropout draws fresh masks from numpy's global RNG at every replay.
    The first capture moves each optimizer's parameters into one flat buffer per dtype (values
    kept, each parameter's array a view of it), so that a replayed update is one call over all of
    them (:mod:`needle.compiler.flat_buffers`). An update that gives a parameter a new array
    (``p.data = p.data - lr * p.grad``, in an optimizer of your own or in ``fn``) keeps the
    parameter's array, with the new values copied in, so the plan stays valid.

    Python side effects in ``fn`` (printing, appending to a list, counting calls) happen only
    while capturing, as with ``jax.jit`` and tinygrad's ``TinyJit``; but the models' attributes
    ``fn`` sets to a number, bool, string or None (``model.train()``, ``model.eval()``), and the
    optimizers' hyper-parameters it sets (``opt.lr = lr``), are set again at each replay, as the
    capture left them, before its steps run. Reading a tensor's value
    into Python inside ``fn`` (``float(loss)``, ``loss.numpy()``, ``if loss > 0:``) raises
    :class:`CaptureError` at capture, naming the line: return the tensor and read it after the call.

    ``fn`` may be a callable object: ``ndl.compile(model)`` reaches the model as its state, and
    the wrapper gives its attributes. A function that runs no ``backward()`` and, with gradients
    enabled, returns a result reading a model's parameters (a forward whose backward the caller
    runs) is run eagerly for that signature, results with their graphs, with one
    :class:`EagerFallbackWarning`: a replay's results have no graph to differentiate.

    On CUDA a replay is one CUDA graph launch, an SGD or Adam update included, with Dropout's
    masks redrawn on the host before it (:mod:`needle.compiler.cuda_graph`). There the first
    call runs the step eagerly before capturing it, so a step the graph cannot hold (a value
    read to the host, a library call CuPy refuses while capturing) is
    not an error: the call returns its eager result, :class:`EagerFallbackWarning` says why once,
    and calls with that signature run eagerly.

    Args:
        fn: the step function; ``@ndl.compile``, ``@ndl.compile()`` and ``ndl.compile(fn)`` work.
        options: none are taken (``torch.compile``'s ``mode=``, ``fullgraph=``, ``dynamic=``...
            raise a TypeError naming them): there is one behaviour, capture once and replay.

    Returns:
        a :class:`CompiledFunction`; its results are Tensors without a graph holding the values
        of that call (copies: results of earlier calls keep theirs).

    Example:
        >>> import numpy as np, needle as ndl
        >>> model = ndl.nn.Linear(3, 2)
        >>> opt = ndl.optim.SGD(model.parameters(), lr=0.1)
        >>> @ndl.compile
        ... def step(x, y):
        ...     opt.reset_grad()
        ...     loss = ndl.nn.SoftmaxLoss()(model(x), y)
        ...     loss.backward()
        ...     opt.step()
        ...     return loss
        >>> x, y = ndl.Tensor(np.ones((4, 3))), ndl.Tensor(np.array([0, 1, 0, 1]))
        >>> first, second = step(x, y), step(x, y)
        >>> step.captures, step.replays, second.op is None
        (1, 1, True)
    """
    if options:
        raise TypeError(
            f"ndl.compile takes no options (got {', '.join(f'{k}={v!r}' for k, v in options.items())}): it has one "
            f"behaviour, capture a step once per signature and replay it. Write ndl.compile(fn) or @ndl.compile"
        )
    if fn is None:
        return compile
    return CompiledFunction(fn)


NUMPY_MAJOR = int(numpy.__version__.split(".")[0])


def require_supported_numpy() -> None:
    """Raise :class:`CaptureError` on numpy 1: the capture records through numpy 2's dispatch of
    ufuncs and functions to array subclasses, and under numpy 1 a replay would not reproduce the
    step (it was found to return the captured values again)."""
    if NUMPY_MAJOR < 2:
        raise CaptureError(
            f"ndl.compile needs numpy >= 2 (this is numpy {numpy.__version__}): its capture relies on "
            f"numpy 2's dispatch to array subclasses. Upgrade numpy (pip install 'numpy>=2'), or call "
            f"the function without ndl.compile (Trainer(..., compile=False), no --compile)"
        )


PLANS_KEPT = 8  # per compiled function; the least recently used is dropped beyond (torch.compile keeps 8 too)


class CompiledFunction:
    """A step function with one captured plan per signature; see :func:`compile`.

    Attributes:
        captures: how many calls captured a plan.
        replays: how many calls replayed one.
    """

    def __init__(self, fn):
        if not callable(fn):
            raise TypeError(f"ndl.compile needs a function, got {type(fn).__name__} {fn!r}")
        self.fn = fn
        self.captures = 0
        self.replays = 0
        self._state = None
        self._plans = {}
        self._last = None  # (fingerprint, gradient mode, argument keys, entry) of the last replay
        self._repeat = None  # (repeat guard, entry): the plan the next call tries first
        self._latest = None  # the entry the last call replayed or captured (whose state adoption restores)
        self._guards = {}  # id(entry) -> its repeat guard, or None where it has none (the entries live in _plans)
        self._warned_recapture = False
        # NOTE: a compiled object (a Module) keeps its attributes its own: copying its __dict__
        # (update_wrapper's default) would give this wrapper stale copies of them
        functools.update_wrapper(self, fn, updated=functools.WRAPPER_UPDATES if isinstance(fn, types.FunctionType) else ())

    def __getattr__(self, name):
        """The compiled object's attributes (``ndl.compile(model).parameters()``, ``.eval()``), as
        ``torch.compile``'s wrapper of a module gives them."""
        fn = self.__dict__.get("fn")
        if fn is None or name.startswith("__"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(fn, name)

    def __get__(self, instance, owner):
        if instance is None:
            return self
        bound = self.__dict__.get("_bound_for")
        if bound is None or bound[0] is not instance:
            compiled = CompiledFunction(self.fn.__get__(instance, owner))
            self.__dict__["_bound_for"] = (instance, compiled)
            return compiled
        return bound[1]

    def __call__(self, *args, **kwargs):
        if traced_array.RECORDER is not None or products._CAPTURE is not None:
            return self._inside_a_capture(args, kwargs)
        repeat = self._repeat
        if repeat is not None and not kwargs and repeat[0](args):
            entry = repeat[1]  # the last call's plan: its signature and state checked in one call
        else:
            entry = self._checked_entry(args, kwargs)
            if entry is None:
                return self._capture(args, kwargs)
        for owner, name, value in entry.attribute_writes:
            # NOTE: what the capturing call set (model.train(), opt.lr = lr inside the step), set
            # before the replay, whose optimizer steps read the hyper-parameters as they are then
            setattr(owner, name, value)
        try:
            result = entry.replay(args, kwargs)
        except ReplayMismatch as mismatch:
            return self._after_mismatch(entry, mismatch, args, kwargs)
        self.replays += entry.replays_a_plan
        return result

    def _inside_a_capture(self, args, kwargs):
        """A call made while a step is being captured (this function called by another compiled
        one): run inline, so that the capture records its operations, returning its results
        without a graph as a replay would. (A replay of its own would compute on plain buffers
        that the outer capture cannot see.)"""
        return _detached(self.fn(*args, **kwargs))

    def _checked_entry(self, args, kwargs):
        """The plan this call replays, by the full checks (signature, then state); None when the call
        must capture. Keeps the repeat guard of the plan chosen (:mod:`needle.compiler.repeat_guard`).

        Before it gives up, state that eager code replaced since the last call by arrays or
        tensors of the same shape (``p.data = p.data - lr * p.grad`` after the call, an eager
        training step's BatchNorm statistics) is adopted into the state the last plan reads
        (:func:`~needle.compiler.state.adopt_replacements`), and the checks run once more."""
        entry = self._entry_by_signature(args, kwargs)
        if entry is None or not entry.ready():
            latest = self._latest
            if latest is None or not adopt_replacements(latest.expected_slots):
                return None
            entry = self._entry_by_signature(args, kwargs)
            if entry is None or not entry.ready():
                return None
        self._latest = entry
        self._keep_repeat_guard(entry, args, self._state, kwargs)
        return entry

    def _entry_by_signature(self, args, kwargs):
        """The plan kept for this call's signature, or None."""
        require_supported_numpy()
        state = self._state
        if state is None or not state.sources.unchanged():  # a global or closure variable rebound: new state
            state = self._state = discover(self.fn, args, kwargs)
        fingerprint = state.fingerprint()
        last = self._last
        # NOTE: a call like the last one (the common case in a training loop) skips building and
        # hashing its signature: the fingerprint is the same object while no attribute changed.
        if (
            last is not None and last[0] is fingerprint and last[1] == GRAD_MODE.enabled and not kwargs
            and tuple(map(_argument_key, args)) == last[2]
        ):
            entry = last[3]
        else:
            key = _signature(args, kwargs, fingerprint)
            entry = self._plans.pop(key, None)
            if entry is None:
                return None
            self._plans[key] = entry  # the most recently used last: the first to go is the oldest
            self._last = (fingerprint, key[2], key[0], entry) if not kwargs else None
        return entry

    def _keep_repeat_guard(self, entry, args, state, kwargs):
        """Make ``entry``'s repeat guard the one the next call tries (built once per plan). A guard
        that failed on a call the full checks then gave the same plan (an attribute that the loop
        reassigns with an equal value every call) is dropped for good: it would fail every call."""
        if kwargs:
            self._repeat = None
            return
        repeat = self._repeat
        if repeat is not None and repeat[1] is entry:
            self._guards[id(entry)] = None
        elif id(entry) not in self._guards:
            self._guards[id(entry)] = repeat_guard(args, state, entry)
        guard = self._guards[id(entry)]
        self._repeat = (guard, entry) if guard is not None else None

    def _capture(self, args, kwargs):
        self._state = state = discover(self.fn, args, kwargs)
        # NOTE: the plan is kept under the signature the call came with: a step that switches its
        # model's mode (model.train() inside) changes the models' attributes, and a replay sets them
        # as the capture left them (entry.attribute_writes).
        before, sources_before = state.attribute_values(), state.sources.read()
        key = _signature(args, kwargs, state.fingerprint())
        capture = capture_cuda if is_cuda_argument(args, kwargs) or holds_cuda_state(state) else capture_cpu
        with AssignmentWatch(state.optimizers, hyperparameters) as watch:
            try:
                entry = capture(self.fn, args, kwargs, state)
            except EagerFallback as fallback:
                # NOTE: warned once: later calls of this signature find the eager entry
                warnings.warn(fallback.reason, EagerFallbackWarning, stacklevel=3)
                entry = EagerEntry(self.fn, fallback.reason, fallback.eager_result, state.slots, fallback.keeps_graph)
        self.captures += 1
        entry.attribute_writes = state.scalar_writes(before, watch.assigned)
        self._plans[key] = entry
        if len(self._plans) > PLANS_KEPT:
            writes = [f"{type(owner).__name__}.{name} (to {value!r})" for owner, name, value in entry.attribute_writes]
            writes += [f"{name} (to {value!r})" for name, value in state.sources.changed_since(sources_before)]
            self._drop_least_recently_used(writes)
        self._last = self._repeat = None
        self._latest = entry
        self._guards = {}  # the state may have been discovered anew: guards are built again from it
        return entry.last_result

    def _drop_least_recently_used(self, last_writes):
        """Keep PLANS_KEPT plans (each holds its buffers); say once that calls keep capturing
        (``last_writes``: the model attributes and globals the latest capture set, described: a
        likely cause)."""
        oldest = next(iter(self._plans))
        self._guards.pop(id(self._plans.pop(oldest)), None)
        if self._warned_recapture:
            return
        self._warned_recapture = True
        name = getattr(self.fn, "__qualname__", repr(self.fn))
        if last_writes:
            cause = (
                f"The step itself sets {', '.join(last_writes)}, and the next call, which comes with that value, "
                f"is a new signature: a model attribute or global the step changes at every call (a counter) "
                f"cannot be replayed. Keep such values outside the compiled function"
            )
        else:
            cause = (
                "Its calls keep finding something new: a model whose tensor attributes are replaced between "
                "calls (an eager training step replaces BatchNorm's running statistics), arguments of a new "
                "shape or value each call, or a global or closure variable it reads rebound to a new object "
                "each call. Compile the whole training step, or call this function without ndl.compile"
            )
        warnings.warn(
            f"ndl.compile: {name} has captured {self.captures} plans, so most of its calls run eagerly while "
            f"capturing, and only the {PLANS_KEPT} most recent plans are kept. {cause}",
            RecaptureWarning,
            stacklevel=4,
        )

    def _after_mismatch(self, entry, mismatch, args, kwargs):
        if not mismatch.undoable:
            raise RuntimeError(
                f"ndl.compile: a value that needle read at {mismatch.guard.where} while capturing differs in "
                f"this call, after the replay had already changed the model's state; call the function "
                f"without ndl.compile to see why this input differs"
            ) from None
        entry.plan.undo_writebacks()
        # NOTE: the eager call raises needle's own error for this input (a label out of range).
        with redrawn(mismatch.draws):
            return entry.outputs_of(self.fn(*args, **kwargs))

    def __repr__(self):
        return f"<ndl.compile of {getattr(self.fn, '__qualname__', self.fn)!r}: {len(self._plans)} plans>"


def _signature(args, kwargs, fingerprint):
    # NOTE: the common case (Tensor arguments) is kept to attribute reads.
    arguments = tuple(map(_argument_key, args))
    keywords = tuple((k, _argument_key(v)) for k, v in sorted(kwargs.items())) if kwargs else ()
    return arguments, keywords, GRAD_MODE.enabled, fingerprint
