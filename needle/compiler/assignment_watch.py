"""Which optimizer hyper-parameters a step assigns while it is captured.

A step may set ``opt.lr = lr`` itself (a schedule passed in as an argument). A replay runs no
Python, so it would leave ``opt.lr`` at whatever the last call set, and the optimizer step it
replays reads ``opt.lr`` then. The replay must set it again, but only where the step sets it: a
loop that sets ``opt.lr`` between calls must keep its value. Comparing values before and after
the capture cannot tell "set to the same value" from "not set", so while a step is captured each
optimizer class gets a data descriptor for each of its hyper-parameters, which stores the value
in the instance as before and notes the assignment.

Example:
    >>> import needle as ndl
    >>> opt = ndl.optim.SGD([ndl.nn.Parameter(ndl.Tensor([1.0]))], lr=0.1)
    >>> with AssignmentWatch([opt], lambda opt: ("lr", "momentum")) as watch:
    ...     opt.lr = 0.1                     # the same value: still an assignment
    >>> watch.assigned[opt], opt.lr, "lr" in vars(type(opt))
    ({'lr'}, 0.1, False)
"""

_NOTHING = object()


class AssignmentWatch:
    """While active, notes the names in ``names_of(obj)`` assigned on each of ``objects``.

    ``assigned``: obj -> set of names assigned (for the objects that had any).
    """

    def __init__(self, objects, names_of):
        self.objects = list(objects)
        self.names_of = names_of
        self.assigned = {}
        self._installed = []  # (class, name, what the class's own dict held, or _NOTHING)

    def __enter__(self):
        self.objects = [obj for obj in self.objects if hasattr(obj, "__dict__")]  # (slots only: nothing to watch)
        watched = {id(obj) for obj in self.objects}
        for obj in self.objects:
            cls = type(obj)
            for name in self.names_of(obj):
                if any(c is cls and n == name for c, n, _ in self._installed):
                    continue
                if hasattr(getattr(cls, name, None), "__set__"):
                    continue  # a property of the class's own: not an instance attribute to watch
                self._installed.append((cls, name, cls.__dict__.get(name, _NOTHING)))
                setattr(cls, name, _Watched(name, cls.__dict__.get(name, _NOTHING), watched, self.assigned))
        return self

    def __exit__(self, *exc):
        for cls, name, original in reversed(self._installed):
            if original is _NOTHING:
                delattr(cls, name)
            else:
                setattr(cls, name, original)
        self._installed = []
        return False


class _Watched:
    """A data descriptor keeping its value in the instance's dict, noting assignments on the watched objects."""

    def __init__(self, name, class_value, watched, assigned):
        self.name, self.class_value, self.watched, self.assigned = name, class_value, watched, assigned

    def __get__(self, obj, owner=None):
        if obj is None:
            return self if self.class_value is _NOTHING else self.class_value
        try:
            return obj.__dict__[self.name]
        except KeyError:
            if self.class_value is _NOTHING:
                raise AttributeError(f"{type(obj).__name__!r} object has no attribute {self.name!r}") from None
            return self.class_value

    def __set__(self, obj, value):
        obj.__dict__[self.name] = value
        if id(obj) in self.watched:
            self.assigned.setdefault(obj, set()).add(self.name)

    def __delete__(self, obj):
        del obj.__dict__[self.name]
