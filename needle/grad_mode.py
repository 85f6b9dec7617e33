"""Grad mode: one thread-local flag that says whether ops record the graph.

Exactly one place reads it (``Value.make_from_op``); ``no_grad`` and ``enable_grad`` save and
restore it, so they nest, work as decorators, and restore the flag when an exception passes.
"""
import functools
import threading


class _GradMode(threading.local):
    enabled = True


GRAD_MODE = _GradMode()


def is_grad_enabled():
    """True when ops record the graph in this thread (the default).

    Example:
        >>> import needle as ndl
        >>> with ndl.no_grad():
        ...     ndl.is_grad_enabled()
        False
        >>> ndl.is_grad_enabled()
        True
    """
    return GRAD_MODE.enabled


class _GradModeSwitch:
    """Sets grad mode on entry and restores the previous mode on exit; also a decorator.

    Used bare (``@no_grad``) it decorates the function at once; called (``@no_grad()``) it
    returns a switch that decorates, or works as a context manager.
    """

    mode = True

    def __new__(cls, function=None):
        if function is None:
            return super().__new__(cls)
        if not callable(function):
            raise TypeError(
                f"{cls.__name__}() takes no arguments, got {type(function).__name__} {function!r}: "
                f"use 'with {cls.__name__}():' or decorate with @{cls.__name__} or @{cls.__name__}()"
            )
        return super().__new__(cls)(function)  # the bare decorator: @no_grad

    def __init__(self, function=None):
        self._saved = []

    def __enter__(self):
        self._saved.append(GRAD_MODE.enabled)
        GRAD_MODE.enabled = self.mode
        return self

    def __exit__(self, *exc_info):
        GRAD_MODE.enabled = self._saved.pop()
        return False

    def __call__(self, function):
        switch_type = type(self)

        @functools.wraps(function)
        def run_in_mode(*args, **kwargs):
            with switch_type():
                return function(*args, **kwargs)

        return run_in_mode


class no_grad(_GradModeSwitch):
    """Context manager and decorator under which every op result is a constant.

    Results have no inputs and no op and ``requires_grad=False``: nothing is kept for backward.
    Use it for evaluation and for updates that must not extend the graph.

    Example:
        >>> import needle as ndl
        >>> w = ndl.Tensor([1.0, 2.0])
        >>> with ndl.no_grad():
        ...     y = w * 2
        >>> y.requires_grad, y.op, y.inputs
        (False, None, ())
        >>> @ndl.no_grad()
        ... def predict(x):
        ...     return x * w
        >>> predict(w).requires_grad
        False
        >>> @ndl.no_grad  # the bare decorator works too
        ... def predict_bare(x):
        ...     return x * w
        >>> predict_bare(w).requires_grad
        False
    """

    mode = False


class enable_grad(_GradModeSwitch):
    """Context manager and decorator that records the graph again inside a ``no_grad`` block.

    Example:
        >>> import needle as ndl
        >>> with ndl.no_grad():
        ...     with ndl.enable_grad():
        ...         ndl.is_grad_enabled()
        True
    """

    mode = True


class set_grad_enabled(_GradModeSwitch):
    """Set grad mode to ``mode``, as a context manager, a decorator or a plain call.

    Example:
        >>> import needle as ndl
        >>> with ndl.set_grad_enabled(False):
        ...     ndl.is_grad_enabled()
        False
    """

    def __new__(cls, mode):
        return object.__new__(cls)

    def __init__(self, mode):
        super().__init__()
        self.mode = bool(mode)
        self._previous = GRAD_MODE.enabled
        GRAD_MODE.enabled = self.mode

    def __enter__(self):
        self._saved.append(self._previous)
        return self

    def __call__(self, function):
        mode = self.mode
        GRAD_MODE.enabled = self._previous

        @functools.wraps(function)
        def run_in_mode(*args, **kwargs):
            with set_grad_enabled(mode):
                return function(*args, **kwargs)

        return run_in_mode


class inference_mode(no_grad):
    """PyTorch's name for evaluation without a graph: ``no_grad`` here (needle has no extra
    inference-only tensor state). ``inference_mode(False)`` leaves grad mode as it is.

    Example:
        >>> import needle as ndl
        >>> w = ndl.Tensor([1.0, 2.0])
        >>> with ndl.inference_mode():
        ...     (w * 2).requires_grad
        False
        >>> @ndl.inference_mode()
        ... def predict(x):
        ...     return x * w
        >>> predict(w).requires_grad
        False
    """

    def __new__(cls, mode=True):
        if isinstance(mode, bool):
            return object.__new__(cls)
        if not callable(mode):
            raise TypeError(
                f"inference_mode(mode) takes True or False, got {type(mode).__name__} {mode!r}: "
                f"use 'with inference_mode():' or decorate with @inference_mode"
            )
        switch = object.__new__(cls)
        switch.__init__(True)
        return switch(mode)  # the bare decorator: @inference_mode

    def __init__(self, mode=True):
        super().__init__()
        self._disables = mode is not False

    def __enter__(self):
        self._saved.append(GRAD_MODE.enabled)
        if self._disables:
            GRAD_MODE.enabled = False
        return self

    def __call__(self, function):
        disables = self._disables

        @functools.wraps(function)
        def run_in_mode(*args, **kwargs):
            with inference_mode(disables):
                return function(*args, **kwargs)

        return run_in_mode
