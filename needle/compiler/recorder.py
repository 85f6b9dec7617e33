"""Recorder: what one capture saw, as a list of steps over fixed arrays.

Every step is a callable with no arguments that redoes one array operation into the array the
capture produced (``numpy.add(a, b, out=r)``), plus the memory it reads and writes (by root
buffer), which :mod:`needle.compiler.plan` uses to drop work nobody observes. Views need no step:
they alias buffers that the steps rewrite in place.
"""
import contextlib
import functools
import inspect
import os
import sys
import threading

import numpy

from ..backend_ndarray import fused_ops
from . import traced_array
from .errors import CaptureError
from .traced_array import TracedArray

_NEEDLE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Files whose frames only pass a value through (tensor.item() -> array.item()): the reader is their caller.
_PASS_THROUGH = tuple(
    os.path.join(_NEEDLE_DIR, *parts)
    for parts in (("tensor.py",), ("autograd.py",), ("backend_ndarray", "ndarray.py"), ("compile",))
)
_OWN_FILES = (os.path.dirname(os.path.abspath(__file__)), os.path.dirname(numpy.__file__))

RANDOM_FUNCTIONS = (
    "rand", "randn", "random", "random_sample", "uniform", "normal", "randint", "binomial", "permutation",
    "standard_normal", "choice",
)
# numpy's functions that make an array from a shape alone: no traced argument reports them, so they
# are wrapped while a capture runs, and what the step writes into their arrays is recorded too
# (``cells[t] = c`` into ``numpy.empty(...)``: an assignment into a plain array reports nothing).
CONSTRUCTORS = {"empty": None, "zeros": 0, "ones": 1, "full": "fill_value"}
# numpy's functions that copy or convert an array without numpy's dispatch (they hand back a plain
# array): wrapped too, so that ``numpy.asarray(x)`` of a step's array stays the step's array.
COPIERS = ("array", "asarray", "ascontiguousarray", "asfortranarray")


def _holds_traced(values):
    """Whether a TracedArray is among ``values`` (also inside nested lists and tuples)."""
    for value in values:
        if isinstance(value, TracedArray):
            return True
        if type(value) in (list, tuple) and _holds_traced(value):
            return True
    return False


def root(array):
    """The array that owns ``array``'s memory (itself when it owns it): numpy's, or CuPy's.

    numpy's ``as_strided`` (the im2col windows of a convolution) puts an object of its own
    between a view and the array it views; the walk goes through it.
    """
    while True:
        base = getattr(array, "base", None)
        if not _is_array(base):
            base = getattr(base, "base", None)  # as_strided's DummyArray holds the array it views
            if not _is_array(base):
                return array
        array = base


def _is_array(value):
    return isinstance(value, numpy.ndarray) or (hasattr(value, "shape") and hasattr(value, "base"))


class Step:
    """One recorded operation: ``run()`` redoes it; ``reads``/``writes`` are root buffers (by id)."""

    __slots__ = ("run", "reads", "writes", "effect", "where")

    def __init__(self, run, reads, writes, effect=False, where=""):
        self.run = run
        self.reads = reads
        self.writes = writes
        self.effect = effect  # kept even when nothing reads what it writes (RNG draws, host calls)
        self.where = where


class Draw(Step):
    """A draw from numpy's global RNG: ``run()`` draws anew into ``result``, the capture's array;
    ``function`` is the numpy function (``numpy.random.rand``, unwrapped)."""

    __slots__ = ("function", "result")

    def __init__(self, function, args, kwargs, result, reads):
        super().__init__(functools.partial(_copy_into, result, function, args, kwargs), reads, {id(root(result))}, effect=True)
        self.function, self.result = function, result


@contextlib.contextmanager
def redrawn(draws):
    """Within the block, numpy's global RNG functions give the values of ``draws`` (the Draw steps a
    replay ran before it stopped, in order) to calls of the same functions, then draw anew.

    A replay stopped by a failed guard has already moved the generator past its draws; the eager
    call that runs instead takes those values, so the draws after it are eager's.
    """
    queue = list(draws)
    if not queue:
        yield
        return
    saved = {}
    for name in RANDOM_FUNCTIONS:
        original = saved[name] = getattr(numpy.random, name)

        @functools.wraps(original)
        def give(*args, original=original, **kwargs):
            if queue and queue[0].function is original:
                value = queue.pop(0).result
                return value.copy() if value.ndim else value[()]
            return original(*args, **kwargs)

        setattr(numpy.random, name, give)
    try:
        yield
    finally:
        for name, original in saved.items():
            setattr(numpy.random, name, original)


class Guard:
    """A value that needle's own code read during capture (a label range check): it must not change."""

    __slots__ = ("array", "convert", "value", "where")

    def __init__(self, array, convert, value, where):
        self.array, self.convert, self.value, self.where = array, convert, value, where

    def holds(self):
        now = self.convert(self.array)
        if isinstance(now, numpy.ndarray):
            return numpy.array_equal(now, self.value)
        return now == self.value


class Recorder:
    """Collects the steps of one capture. ``start()`` makes it the active recorder.

    ``constructors``: whether the arrays the capturing thread makes from a shape alone
    (``CONSTRUCTORS``) are the capture's (the CPU capture) or plain arrays (the host's part of a
    CUDA capture, whose device arrays numpy does not make).
    """

    def __init__(self, constructors=True):
        self.constructors = constructors
        self.steps = []
        self.guards = []  # (position in steps, Guard)
        self.paused = False
        self.produced = {}  # id(root) -> root: buffers this capture made (the plan owns them)
        self.known = {}  # id(root) -> root: inputs and state, which persist across replays
        self.restored = set()  # ids of foreign buffers given a restore step
        self._saved_random = {}
        self._saved_constructors = {}
        self.thread = None  # the capturing thread (start)

    # ---- activation --------------------------------------------------------------------------
    def start(self):
        if traced_array.RECORDER is not None:
            raise CaptureError("ndl.compile: a compiled function was called while another one was capturing")
        traced_array.RECORDER = self
        self.thread = threading.get_ident()
        fused_ops.CAPTURE_HOOK = self.kernel
        for name in RANDOM_FUNCTIONS:
            original = self._saved_random[name] = getattr(numpy.random, name)
            setattr(numpy.random, name, self._random(original))
        for name, fill in CONSTRUCTORS.items() if self.constructors else ():
            original = self._saved_constructors[name] = getattr(numpy, name)
            setattr(numpy, name, self._constructor(original, fill))
        for name in COPIERS if self.constructors else ():
            original = self._saved_constructors[name] = getattr(numpy, name)
            setattr(numpy, name, self._copier(original))

    def stop(self):
        if traced_array.RECORDER is self:
            traced_array.RECORDER = None
        if fused_ops.CAPTURE_HOOK == self.kernel:
            fused_ops.CAPTURE_HOOK = None
        for name, original in self._saved_random.items():
            setattr(numpy.random, name, original)
        for name, original in self._saved_constructors.items():
            setattr(numpy, name, original)
        self._saved_random = {}
        self._saved_constructors = {}

    def run_paused(self, function, *args, **kwargs):
        """Run ``function`` without recording (a host call such as an optimizer step)."""
        saved, self.paused = self.paused, True
        try:
            return function(*args, **kwargs)
        finally:
            self.paused = saved

    # ---- bookkeeping -------------------------------------------------------------------------
    def know(self, array):
        """Mark ``array``'s buffer as persistent (an input buffer or state)."""
        buffer = root(array)
        self.known[id(buffer)] = buffer

    def trace(self, array):
        return array.view(TracedArray)

    def _ids(self, values):
        found = set()
        for value in values:
            if isinstance(value, numpy.ndarray):
                found.add(id(root(value)))
            elif type(value) in (tuple, list):
                found |= self._ids(value)
            elif type(value) is dict:
                found |= self._ids(value.values())
        return found

    def _produce(self, array):
        buffer = root(array)
        self.produced[id(buffer)] = buffer
        return id(buffer)

    def _add(self, run, reads, writes, effect=False):
        for value in writes:
            if isinstance(value, numpy.ndarray):
                self._before_write(value)
        self.steps.append(Step(run, self._ids(reads), self._ids(writes), effect))

    def _before_write(self, array):
        """A write into a buffer the capture did not make and does not know (an array made with
        numpy.zeros during capture): restore its captured contents first at every replay."""
        buffer = root(array)
        key = id(buffer)
        if key in self.produced or key in self.known or key in self.restored:
            return
        self.restored.add(key)
        snapshot = buffer.copy()
        self.steps.append(Step(functools.partial(numpy.copyto, buffer, snapshot), set(), {key}))

    def _new(self, result, run_into):
        """Record a step that writes the new array ``result``; return it traced."""
        if not isinstance(result, numpy.ndarray):
            result = numpy.asarray(result)
        self._produce(result)
        run, reads = run_into(result)
        self.steps.append(Step(run, self._ids(reads), {id(root(result))}))
        return result.view(TracedArray)

    # ---- what TracedArray reports ------------------------------------------------------------
    def ufunc(self, function, method, arguments, kwargs, outs):
        result = function(*arguments, **kwargs)
        if outs is not None:
            self._add(_bound_ufunc(function, arguments, kwargs), arguments, kwargs["out"])
            return outs[0] if len(outs) == 1 else outs
        if method == "at":
            self._add(functools.partial(function, *arguments, **kwargs), arguments, arguments[:1])
            return None
        if isinstance(result, tuple):
            results = tuple(numpy.asarray(r) for r in result)
            for r in results:
                self._produce(r)
            self.steps.append(
                Step(_bound_ufunc(function, arguments, dict(kwargs, out=results)), self._ids(arguments), self._ids(results))
            )
            return tuple(r.view(TracedArray) for r in results)
        return self._new(result, lambda out: (_bound_ufunc(function, arguments, dict(kwargs, out=(out,))), arguments))

    def function(self, func, args, kwargs, takes_out=None):
        result = self.run_paused(func, *args, **kwargs)  # NOTE: paused: numpy's own numpy.empty inside is not the step's
        if result is None:  # an in-place function (copyto, put_along_axis, fill, sort): it writes its first array
            self._add(functools.partial(func, *args, **kwargs), args, args[:1])
            return None
        if isinstance(result, (tuple, list)) and result and all(isinstance(r, numpy.ndarray) for r in result):
            if all(_is_view(r, args) for r in result):
                return type(result)(r.view(TracedArray) for r in result)
            results = [numpy.array(r) for r in result]
            for r in results:
                self._produce(r)
            self.steps.append(Step(functools.partial(_copy_each, results, func, args, kwargs), self._ids((args, kwargs)), self._ids(results)))
            return type(result)(r.view(TracedArray) for r in results)
        if isinstance(result, numpy.ndarray) and _is_view(result, (args, kwargs)):
            return result.view(TracedArray)
        if not isinstance(result, (numpy.ndarray, numpy.generic)):
            return result  # metadata (a shape, a dtype, a flag), not array values
        if takes_out is None:
            takes_out = "out" not in kwargs and _takes_out(func)
        if takes_out:
            return self._new(result, lambda out: (functools.partial(func, *args, out=out, **kwargs), (args, kwargs)))
        return self._new(result, lambda out: (functools.partial(_copy_into, out, func, args, kwargs), (args, kwargs)))

    def getitem(self, base, index):
        result = base[index]
        if isinstance(result, numpy.ndarray) and numpy.may_share_memory(result, base):
            return result.view(TracedArray)  # basic indexing: a view
        return self._new(result, lambda out: (functools.partial(_copy_into, out, _getitem, (base, index), {}), (base, index)))

    def setitem(self, base, index, value):
        base[index] = value
        self._add(functools.partial(_setitem, base, index, value), (index, value), (base,))

    def value_read(self, array, kind, convert, value):
        if not self._varies(array):
            return  # NOTE: a constant the step made (numpy.zeros, filled): the same value at every replay
        frame = _reader_frame(sys._getframe(2))
        where = f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"
        if frame is not None and frame.f_code.co_filename.startswith(_NEEDLE_DIR + os.sep):
            self._produce_read(array)
            self.guards.append((len(self.steps), Guard(array, convert, value.copy() if isinstance(value, numpy.ndarray) else value, where)))
            return
        raise CaptureError(
            f"ndl.compile: {where} reads a tensor's value into Python ({kind}) while capturing; a replay runs "
            f"only the array operations, so that value (and every Python decision made from it) would be "
            f"frozen at the first call. Return the tensor from the compiled function and read it after the "
            f"call (loss = step(x, y); float(loss)), or call the function without ndl.compile",
            where=where,
        )

    def _varies(self, array):
        """Whether ``array``'s values can differ from call to call: it is, or is computed from, an
        input, the state, an RNG draw or what a host call leaves."""
        varying = set(self.known)
        for step in self.steps:
            if step.effect or step.reads & varying:
                varying |= step.writes
        return id(root(array)) in varying

    def _produce_read(self, array):
        pass  # guards keep their array's producers alive through the plan's liveness roots

    def kernel(self, kernel, fresh, args):
        """A C kernel's call (:func:`needle.backend_ndarray.fused_ops.run`): run it on the plain arrays
        and record it as one step writing its first argument (a new buffer when ``fresh``). numpy's
        dispatch, which reports every numpy call, does not see a call into C."""
        # NOTE: only a call on traced arrays belongs to the capture; the hook is a module global,
        # so a call on plain arrays (another thread's eager step) runs as it would without it.
        captured = any(isinstance(arg, TracedArray) for arg in args)
        args = traced_array.plain(args)
        if not kernel(*args):
            return None
        if not captured or traced_array.RECORDER is not self or self.paused:
            return args[:1] if fresh else ()
        if fresh:
            self._produce(args[0])
        self._add(functools.partial(kernel, *args), args, args[:1])
        return (args[0].view(TracedArray),) if fresh else ()

    def host_call(self, function, reads_after, replay=None):
        """Run ``function`` (an optimizer step) now, unrecorded inside, and ``replay`` (default:
        ``function``) at every replay."""
        self.run_paused(function)
        self.steps.append(Step(replay or function, self._ids(reads_after()), set(), effect=True))

    def _constructor(self, original, fill):
        """``original`` (``numpy.zeros``...), whose array is the capture's while it records: traced,
        and filled again at each replay (``fill``: the value, the name of the argument holding it, or
        None for ``numpy.empty``, whose values are undefined anyway)."""
        recorder = self

        @functools.wraps(original)
        def make(*args, **kwargs):
            result = original(*args, **kwargs)
            if traced_array.RECORDER is not recorder or recorder.paused or threading.get_ident() != recorder.thread:
                return result  # NOTE: another thread's arrays (a data loader's) are not the step's
            recorder._produce(result)
            if fill is not None:
                value = fill if not isinstance(fill, str) else (args[1] if len(args) > 1 else kwargs[fill])
                run = functools.partial(numpy.copyto, result, traced_array.plain(value), casting="unsafe")
                recorder.steps.append(Step(run, recorder._ids((value,)), {id(root(result))}))
            return result.view(TracedArray)

        return make

    def _copier(self, original):
        """``original`` (``numpy.asarray``...), recorded like a numpy function when the capturing
        thread gives it a step's array (a view stays a traced view, a copy becomes a step)."""
        recorder = self

        @functools.wraps(original)
        def copy(*args, **kwargs):
            if (
                traced_array.RECORDER is not recorder or recorder.paused
                or threading.get_ident() != recorder.thread or not _holds_traced(args)
            ):
                return original(*args, **kwargs)
            plain_args, plain_kwargs = traced_array.plain(args), traced_array.plain(kwargs)
            return recorder.function(original, plain_args, plain_kwargs, takes_out=False)

        return copy

    def _random(self, original):
        recorder = self

        @functools.wraps(original)
        def draw(*args, **kwargs):
            if traced_array.RECORDER is not recorder or recorder.paused:
                return original(*args, **kwargs)
            args, kwargs = traced_array.plain(args), traced_array.plain(kwargs)
            result = numpy.asarray(original(*args, **kwargs))
            recorder._produce(result)
            recorder.steps.append(Draw(original, args, kwargs, result, recorder._ids((args, kwargs))))
            return result.view(TracedArray)

        return draw


_OUT_BY_KEYWORD = (numpy.maximum, numpy.minimum)  # numpy 2.4 deprecates their positional out


_REDUCE_KEYWORDS = frozenset(("axis", "dtype", "keepdims", "where", "out"))


def _bound_ufunc(function, arguments, kwargs):
    """``function(*arguments, **kwargs)`` as a call with no arguments. A plain ufunc call whose only
    keyword is ``out`` passes its outputs positionally: numpy parses that faster (0.5 against 0.9 us)."""
    out = kwargs.get("out")
    if (
        isinstance(function, numpy.ufunc) and function not in _OUT_BY_KEYWORD and len(kwargs) == 1 and type(out) is tuple
        and len(out) == function.nout and len(arguments) == function.nin
    ):
        return functools.partial(function, *arguments, *out)
    if type(out) is tuple and len(out) == 1:
        out = out[0]  # reduce and accumulate take one array, not a tuple
        kwargs = dict(kwargs, out=out)
    if (
        getattr(function, "__name__", None) == "reduce" and isinstance(getattr(function, "__self__", None), numpy.ufunc)
        and len(arguments) == 1 and kwargs.get("where", True) is True and set(kwargs) <= _REDUCE_KEYWORDS
        and isinstance(out, numpy.ndarray)
    ):
        # NOTE: reduce(array, axis, dtype, out, keepdims) positionally: 0.6 us a call less than keywords.
        axis, dtype, keepdims = kwargs.get("axis", 0), kwargs.get("dtype"), kwargs.get("keepdims", False)
        return functools.partial(function, arguments[0], axis, dtype, out, keepdims)
    return functools.partial(function, *arguments, **kwargs)


def _is_view(result, sources):
    for source in _arrays_in(sources):
        if numpy.may_share_memory(result, source):
            return True
    return False


def _arrays_in(value):
    if isinstance(value, numpy.ndarray):
        yield value
    elif type(value) in (tuple, list):
        for item in value:
            yield from _arrays_in(item)
    elif type(value) is dict:
        for item in value.values():
            yield from _arrays_in(item)


@functools.lru_cache(maxsize=None)
def _takes_out(func):
    try:
        return "out" in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False


def _copy_into(out, func, args, kwargs):
    numpy.copyto(out, func(*args, **kwargs), casting="unsafe")


def _copy_each(outs, func, args, kwargs):
    for out, value in zip(outs, func(*args, **kwargs)):
        numpy.copyto(out, value, casting="unsafe")


def _getitem(base, index):
    return base[index]


def _setitem(base, index, value):
    base[index] = value


def _reader_frame(frame):
    """The frame that asked for a value: the first one outside needle's pass-through files and numpy."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith(_PASS_THROUGH) or filename.startswith(_OWN_FILES)):
            return frame
        frame = frame.f_back
    return None
