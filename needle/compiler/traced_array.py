"""TracedArray: a numpy array that reports every operation on it to the active recorder.

During a capture (:mod:`needle.compiler.recorder`) the arrays of the step's inputs and state are
viewed as TracedArray. numpy hands every ufunc (operators, in-place operators, reductions,
``@``), every numpy function and the few array methods that bypass both to this class, which
computes the result on plain arrays, tells the recorder, and returns the result traced again.
Outside a capture a TracedArray behaves as a plain array and returns plain results.
"""
import numpy

RECORDER = None
"""The recorder of the capture in progress, or None (set by ``Recorder.start``/``stop``)."""


def plain(value):
    """``value`` with every TracedArray inside it (also in tuples, lists, dicts) seen as a plain array."""
    if isinstance(value, TracedArray):
        return value.view(numpy.ndarray)
    if type(value) is tuple or type(value) is list:
        return type(value)(plain(item) for item in value)
    if type(value) is dict:
        return {key: plain(item) for key, item in value.items()}
    return value


def _active():
    recorder = RECORDER
    if recorder is None or recorder.paused:
        return None
    return recorder


class TracedArray(numpy.ndarray):
    """A view of an array whose operations are recorded while a capture is active."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        arguments = plain(inputs)
        outs = kwargs.get("out")
        if outs is not None:
            kwargs["out"] = plain(outs)
        function = ufunc if method == "__call__" else getattr(ufunc, method)
        recorder = _active()
        if recorder is None:
            return function(*arguments, **kwargs)
        return recorder.ufunc(function, method, arguments, kwargs, outs)

    def __array_function__(self, func, types, args, kwargs):
        recorder = _active()
        if recorder is None:
            return func(*plain(args), **plain(kwargs))
        return recorder.function(func, plain(args), plain(kwargs))

    def __getitem__(self, index):
        recorder = _active()
        base = self.view(numpy.ndarray)
        if recorder is None:
            return base[plain(index)]
        return recorder.getitem(base, plain(index))

    def __setitem__(self, index, value):
        recorder = _active()
        base = self.view(numpy.ndarray)
        if recorder is None:
            base[plain(index)] = plain(value)
            return
        recorder.setitem(base, plain(index), plain(value))

    # ---- value reads: a value leaving the arrays for Python ----------------------------------
    def _read(self, kind, convert):
        value = convert(self.view(numpy.ndarray))
        recorder = _active()
        if recorder is not None:
            recorder.value_read(self.view(numpy.ndarray), kind, convert, value)
        return value

    def __bool__(self):
        return self._read("bool()", bool)

    def __float__(self):
        return self._read("float()", float)

    def __int__(self):
        return self._read("int()", int)

    def __index__(self):
        return self._read("an index", lambda array: array.__index__())

    def item(self, *args):
        return self._read(".item()", lambda array: array.item(*args))

    def tolist(self):
        return self._read(".tolist()", lambda array: array.tolist())

    def get(self):
        """The host array (the CuPy name, which ``NDArray.numpy()`` calls): a value read."""
        return self._read(".numpy()", lambda array: array.copy())

    def __repr__(self):
        if _active() is not None:
            return f"<traced array shape={self.shape} dtype={self.dtype}: its value is not known while capturing>"
        return repr(self.view(numpy.ndarray))

    __str__ = __repr__


def _method(name):
    """An ndarray method that computes without numpy's dispatch, recorded like a numpy function."""
    base_method = getattr(numpy.ndarray, name)

    def method(self, *args, **kwargs):
        recorder = _active()
        arguments = (self.view(numpy.ndarray),) + plain(args)
        if recorder is None:
            return base_method(*arguments, **plain(kwargs))
        return recorder.function(base_method, arguments, plain(kwargs), takes_out=name in _METHODS_WITH_OUT)

    method.__name__ = name
    return method


_METHODS_WITH_OUT = frozenset({"argmax", "argmin", "cumsum", "cumprod", "take", "round", "dot", "trace"})
for _name in (
    "argmax", "argmin", "argsort", "sort", "nonzero", "cumsum", "cumprod", "dot", "take", "repeat",
    "round", "put", "partition", "trace", "searchsorted", "compress", "choose", "astype", "copy",
    "fill", "flatten", "ravel", "reshape", "transpose", "squeeze", "swapaxes", "diagonal",
):
    setattr(TracedArray, _name, _method(_name))
del _name
