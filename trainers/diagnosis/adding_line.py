"""Which line of the user's loop adds to a container, and by what expression the user names it.

Given the container object that holds retained graphs, the source of each user frame on the
stack is parsed and every statement that could add to something (``E.append(...)``,
``E.extend(...)``, ``E[key] = ...``, ``E += ...``, ...) has its target ``E`` evaluated in that
frame: the statement whose ``E`` *is* the container is the adding line, and ``E`` as the user
wrote it (``hist["train"]["loss"]``, ``self.curve``) is the container's name. Only names,
attributes and constant or name subscripts are evaluated, so no user function is called.
"""
import ast
import inspect
import sys
import textwrap

from .sites import is_framework_file
from .source import lines_of_file

ADDING_METHODS = ("append", "extend", "insert", "appendleft", "extendleft", "add", "update", "setdefault")


class AddingLine:
    """A statement that adds to the container: where, the user's expression for the container,
    how it adds (a method name, ``"__setitem__"`` or ``"+="``) and the stored expressions."""

    def __init__(self, site, container_expression, method, arguments, key=None):
        self.site = site
        self.container_expression = container_expression
        self.method = method
        self.arguments = arguments  # [(ast node, source text)] of what is stored
        self.key = key  # the subscript's source, for __setitem__ (and insert's index)


def find_adding_line(container, frame, max_frames=8):
    """The ``AddingLine`` for ``container`` in ``frame`` or the user frames around it; None if not found."""
    fallback = None
    for _ in range(max_frames):
        if frame is None:
            break
        if not is_framework_file(frame.f_code.co_filename):
            for line in _candidates(frame):
                if _evaluate(line.target, frame) is container:
                    adding = line.adding_line()
                    if not any(_detaches(node) for node, _ in adding.arguments):
                        return adding
                    fallback = fallback or adding
        frame = frame.f_back
    return fallback


def name_held_in_frames(container, frame, max_frames=8):
    """A name the user's frames know ``container`` by (``losses``, ``hist["train"]``), or None."""
    for _ in range(max_frames):
        if frame is None:
            return None
        if not is_framework_file(frame.f_code.co_filename):
            for name, value in list(frame.f_locals.items()):
                if value is container:
                    return name
                if isinstance(value, dict):
                    for key, item in list(value.items()):
                        if item is container and isinstance(key, (str, int)):
                            return f"{name}[{key!r}]"
                elif hasattr(value, "__dict__") and not isinstance(value, type):
                    for attribute, item in list(vars(value).items()):
                        if item is container:
                            return f"{name}.{attribute}"
        frame = frame.f_back
    return None


class _Candidate:
    def __init__(self, source, target, method, arguments, lineno, filename, key=None):
        self.source, self.target, self.method = source, target, method
        self.arguments, self.lineno, self.filename, self.key = arguments, lineno, filename, key

    def adding_line(self):
        segment = lambda node: ast.get_source_segment(self.source, node) or ast.unparse(node)  # noqa: E731
        return AddingLine(
            (self.filename, self.lineno),
            segment(self.target),
            self.method,
            [(node, segment(node)) for node in self.arguments],
            key=segment(self.key) if self.key is not None else None,
        )


_PARSED = {}


def _candidates(frame):
    code = frame.f_code
    # NOTE: code objects compare equal across files (co_filename is not compared): the file is part of the key
    key = (code.co_filename, code)
    cached = _PARSED.get(key)
    if cached is not None:
        return cached
    try:
        if code.co_name == "<module>":  # a script's loop: the whole file (getsourcelines gives one block)
            lines, start = lines_of_file(code.co_filename), 1
            if not lines:
                raise OSError(code.co_filename)
        else:
            lines, start = inspect.getsourcelines(code)
    except (OSError, TypeError):
        _PARSED[key] = []
        return []
    source = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(source)
    except SyntaxError:
        _PARSED[key] = []
        return []
    offset = max(start, 1) - 1
    found = []
    for node in ast.walk(tree):
        lineno = getattr(node, "lineno", 0) + offset
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ADDING_METHODS:
            arguments = list(node.args) + [k.value for k in node.keywords]
            key = None
            if node.func.attr == "insert" and len(node.args) == 2:
                key, arguments = node.args[0], [node.args[1]]
            found.append(_Candidate(source, node.func.value, node.func.attr, arguments, lineno, code.co_filename, key))
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript):
                    found.append(
                        _Candidate(source, target.value, "__setitem__", [node.value], lineno, code.co_filename, target.slice)
                    )
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
            found.append(_Candidate(source, node.target, "+=", [node.value], lineno, code.co_filename))
    if len(_PARSED) > 256:
        _PARSED.clear()
    _PARSED[key] = found
    return found


def _inside(line, other):
    """Whether ``line``'s call is part of ``other``'s target (``setdefault`` in ``d.setdefault(k, []).append``)."""
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.value is line.target
        for node in ast.walk(other.target)
    )


_MISSING = object()


def _evaluate(node, frame):
    """The value of a name / attribute / constant-or-name subscript in ``frame``; _MISSING otherwise."""
    try:
        if isinstance(node, ast.Name):
            if node.id in frame.f_locals:
                return frame.f_locals[node.id]
            return frame.f_globals.get(node.id, _MISSING)
        if isinstance(node, ast.Attribute):
            owner = _evaluate(node.value, frame)
            return _MISSING if owner is _MISSING else inspect.getattr_static(owner, node.attr, _MISSING)
        if isinstance(node, ast.Subscript):
            owner = _evaluate(node.value, frame)
            if owner is _MISSING or not isinstance(owner, (dict, list, tuple)):
                return _MISSING
            if isinstance(node.slice, ast.Constant):
                key = node.slice.value
            elif isinstance(node.slice, ast.Name):
                key = _evaluate(node.slice, frame)
            else:
                return _MISSING
            return owner[key]
    except (KeyError, IndexError, TypeError):
        return _MISSING
    return _MISSING


def _detaches(node):
    """Whether some part of ``node`` is detached or made a number: the line of a fixed twin."""
    return any(_already_detached(part) for part in ast.walk(node) if isinstance(part, ast.Call))


def _already_detached(node):
    """``x.detach()``, ``float(...)``, ``x.numpy()``, ``x.item()``: nothing of the graph is stored."""
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("detach", "numpy", "item", "tolist"):
            return True
        if isinstance(node.func, ast.Name) and node.func.id in ("float", "int"):
            return True
    if isinstance(node, (ast.List, ast.Tuple)):
        return all(_already_detached(item) for item in node.elts)
    return isinstance(node, ast.Constant)


class AddingLineWatcher:
    """Catches, as it runs, the user line that adds to a container (for lines in functions that
    were not on the stack when the container was found, such as a logger's ``log`` method).

    While watching, a profile function (``sys.setprofile``: calls, returns and calls of C
    functions such as ``list.append``) compares the container's length after every event with the
    last one seen. Where it grew, the user frame that was running holds the adding line: the
    statement at, or last before, the frame's current line whose target is the container.
    ``sys.settrace`` is left alone, so a debugger or a coverage tool (which hold the trace
    function) neither stops the watch nor is disturbed by it; nothing is watched while a
    profiler holds the profile function.
    """

    def __init__(self):
        self.container = None
        self.caught = None  # an AddingLine, once caught
        self._length = 0

    @property
    def active(self):
        return self.container is not None

    def start(self, container, frame) -> bool:
        """Watch ``container`` from now on; False (and nothing watched) if profiling is taken."""
        if sys.getprofile() is not None:
            return False
        self.container, self.caught, self._length = container, None, len(container)
        sys.setprofile(self._event)
        return True

    def stop(self) -> None:
        if self.container is None:
            return
        sys.setprofile(None)
        self.container = None

    def _event(self, frame, event, arg):
        container = self.container
        if container is None or self.caught is not None:
            return
        length = len(container)
        grew, self._length = length > self._length, length
        if grew:
            # NOTE: a "call" event reports the callee's frame; the growth happened in its caller.
            self._catch(frame.f_back if event == "call" else frame)

    def _catch(self, frame):
        """The adding line in the first user frame from ``frame`` outwards."""
        while frame is not None and is_framework_file(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is None:
            return
        lineno = frame.f_lineno
        adding = [line for line in _candidates(frame) if line.lineno <= lineno and _evaluate(line.target, frame) is self.container]
        # NOTE: a target that is a call (``self.scalars.setdefault(tag, []).append(...)``) cannot be
        # evaluated without running user code; the adding statement on the running line is the one.
        on_line = [line for line in _candidates(frame) if line.lineno == lineno and line.method in ADDING_METHODS]
        if adding:
            self.caught = max(adding, key=lambda line: line.lineno).adding_line()
        elif on_line:
            # ``a.setdefault(k, []).append(v)``: the outermost call (whose target holds the others) adds
            outer = [line for line in on_line if not any(line.target is not o.target and _inside(line, o) for o in on_line)]
            self.caught = (outer or on_line)[0].adding_line()
        else:
            self.caught = AddingLine((frame.f_code.co_filename, lineno), None, None, [])
