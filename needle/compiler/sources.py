"""Sources: the global names and closure cells a compiled function reads its objects through.

A plan holds the objects the capture found (the model, the optimizer, a tensor, a number). When
the name is bound to another object later, a replay would still use the captured one: a notebook
cell run again (``model = nn.Sequential(...)``) would go on training the old model, and a global
``lr = 0.01`` would keep the captured 0.1. So, as ``torch.compile`` guards on the globals it
reads, the objects behind a function's sources are part of its signature (numbers, strings,
bools and None by value, anything else by identity), and a change makes the next call discover
the state again and select, or capture, the plan for it.

Only the names the function's code loads as globals count (``LOAD_GLOBAL``, also in the
comprehensions and lambdas inside it), not attribute names that happen to match a global
(``opt.lr`` does not read a global ``lr``).

Example:
    >>> scale = 2.0
    >>> def f(x):
    ...     return x * scale
    >>> sources = Sources.of(f)
    >>> sources.key()
    (2.0,)
    >>> scale = 3.0
    >>> sources.unchanged(), Sources.of(f).key()
    (False, (3.0,))
"""
import dis
import functools

SCALARS = (bool, int, float, str, type(None))
MISSING = object()  # what an unbound global or an empty cell reads as


class Sources:
    """The sources of one function, with the objects they held when made."""

    __slots__ = ("globals", "names", "cells", "values")

    def __init__(self, namespace, names, cells):
        self.globals = namespace
        self.names = names
        self.cells = cells
        self.values = self.read()

    @classmethod
    def of(cls, fn):
        """The sources of ``fn`` (a function or a bound method; anything else has none)."""
        function = getattr(fn, "__func__", fn)
        code = getattr(function, "__code__", None)
        namespace = getattr(function, "__globals__", None)
        if code is None or namespace is None:
            return cls({}, (), ())
        names = tuple(name for name in _global_loads(code) if name in namespace)
        cells = tuple(cell for cell in (function.__closure__ or ()) if cell_value(cell) is not MISSING)
        return cls(namespace, names, cells)

    def read(self):
        """The objects the sources hold now, in order."""
        get = self.globals.get
        return tuple(get(name, MISSING) for name in self.names) + tuple(map(cell_value, self.cells))

    def unchanged(self):
        """Whether every source still holds the object it held when these sources were made."""
        return all(map(_same, self.read(), self.values))

    def key(self):
        """The part of the signature the sources make (numbers by value, objects by identity)."""
        return tuple(value if type(value) in SCALARS else id(value) for value in self.values)

    def changed_since(self, before):
        """``(name, value)`` for each source whose object differs from ``before`` (a :meth:`read`)."""
        labels = self.names + tuple(f"closure variable {i}" for i in range(len(self.cells)))
        return [(label, now) for label, now, then in zip(labels, self.read(), before) if not _same(now, then)]


def cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return MISSING


def _same(now, then):
    """The same object, or an equal number or string (``lr = 0.1`` assigned again each epoch)."""
    return now is then or (type(now) in SCALARS and type(now) is type(then) and now == then)


@functools.lru_cache(maxsize=256)
def _global_loads(code):
    """The global names ``code`` (and the code objects inside it) loads, in first-use order."""
    names = []
    for instruction in dis.get_instructions(code):
        if instruction.opname in ("LOAD_GLOBAL", "STORE_GLOBAL") and instruction.argval not in names:
            names.append(instruction.argval)
    for constant in code.co_consts:
        if hasattr(constant, "co_code"):
            names.extend(name for name in _global_loads(constant) if name not in names)
    return tuple(names)
