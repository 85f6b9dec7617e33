"""Evidence about graph nodes, gathered only once a leak is suspected.

While noting, every new graph node is noted with the iteration it was made in and two user
lines: the innermost one (inside the user's own layer, say) and the line in the loop that calls
``monitor.step()`` (the loop's own line, such as ``h = cell(x, h)``). Nothing is noted, and
nothing costs, in a healthy loop. The questions asked of the origins are answered from what the
nodes do, never from names:

- which noted nodes survive a later iteration (retained), after a garbage collection;
- which of them feed a node of a later iteration (a value carried across iterations), and
  whether that carried value goes back into the forward pass (a backward() went through its
  consumer, or the consumer also reads a weight) or only piles up (an accumulation);
- which container (list, dict, set, deque) holds the newest retained graphs;
- whether the nodes of an iteration read trained weights (an evaluation forward).
"""
import collections
import gc
import sys
import types
import weakref

from needle import autograd, graph_observers
from needle.nn import Parameter

from .sites import is_framework_file

_CONTAINER_TYPES = (list, dict, set, collections.deque)


class NodeOrigin:
    """Where and when a node was made: a weak reference, the iteration it was made in, the user frames that
    made it, and what it read when it was made (it may be gone by the iteration's end)."""

    __slots__ = ("ref", "iteration", "stack", "reads_weight", "reads_earlier_graph", "nbytes")

    def __init__(self, ref, iteration, stack, reads_weight, reads_earlier_graph, nbytes):
        self.ref = ref
        self.iteration = iteration  # None for nodes a backward() made (gradient graphs)
        self.stack = stack  # ((code, filename, lineno), ...) of user frames, innermost first
        self.reads_weight = reads_weight
        self.reads_earlier_graph = reads_earlier_graph  # reads a graph node made before noting began
        self.nbytes = nbytes

    @property
    def site(self):
        """``(filename, lineno)`` of the innermost user line that made the node (None if none)."""
        return self.stack[0][1:] if self.stack else None

    def site_in(self, code):
        """The line of the frame running ``code`` when the node was made, or None."""
        for frame_code, filename, lineno in self.stack:
            if frame_code is code:
                return filename, lineno
        return None


class LeakLocator:
    """Notes where and when each new graph node is made while active, and answers questions about them."""

    def __init__(self):
        self.active = False
        self.iteration = 0
        self.started_at = 0
        self._origins = []
        self._noted_ids = set()

    # ---- noting --------------------------------------------------------------------------
    def start(self, iteration):
        """Note every node made from now on, as made in ``iteration`` (until ``advance``)."""
        self.iteration = self.started_at = iteration
        self._origins = []
        self._noted_ids = set()
        if not self.active:
            autograd.add_node_observer(self._note)
        self.active = True

    def advance(self, iteration):
        self.iteration = iteration

    def stop(self):
        if self.active:
            autograd.remove_node_observer(self._note)
        self.active = False
        self._origins = []
        self._noted_ids = set()

    def _note(self, node):
        in_backward = graph_observers.in_backward()
        frame = sys._getframe(1)
        while frame is not None and is_framework_file(frame.f_code.co_filename):
            frame = frame.f_back
        stack = []
        while frame is not None and len(stack) < _STACK_DEPTH:
            code = frame.f_code
            if not is_framework_file(code.co_filename):
                stack.append((code, code.co_filename, frame.f_lineno))
            frame = frame.f_back
        # NOTE: a node that backward() made (a gradient graph) is noted with iteration None: it
        # reaches back into every graph backward() went through, but no user line made it.
        noted = self._noted_ids
        earlier = any(x.op is not None and id(x) not in noted for x in node.inputs)
        noted.add(id(node))
        self._origins.append(
            NodeOrigin(
                weakref.ref(node),
                None if in_backward else self.iteration,
                tuple(stack),
                reads_weight(node),
                earlier,
                autograd.held_bytes((node,), exclusive=True),  # the bytes it added: views and shared buffers add none
            )
        )

    # ---- questions ------------------------------------------------------------------------
    def any_retained(self, iteration):
        """Whether a node noted before ``iteration`` is still alive (cheap: no collection)."""
        return any(o.iteration is not None and o.iteration < iteration and o.ref() is not None for o in self._origins)

    def alive(self, collect=True):
        """``(node, origin)`` for every noted forward node still alive (after a collection)."""
        if collect:
            gc.collect()  # graphs in reference cycles are garbage, not retained
        pairs = []
        for origin in self._origins:
            node = origin.ref()
            if node is not None and origin.iteration is not None:
                pairs.append((node, origin))
        return pairs

    def origins_of(self, iteration):
        """The origins of every node made in ``iteration``, alive or not."""
        return [origin for origin in self._origins if origin.iteration == iteration]

    @staticmethod
    def retained(alive, iteration):
        """Of ``alive``, those made before ``iteration``: they outlived a whole later iteration."""
        return [(node, origin) for node, origin in alive if origin.iteration < iteration]

    def crossings(self, alive, iteration):
        """``(consumer, consumer origin, carried node, carried origin)`` where a node reads a node
        noted in an earlier iteration, or a retained node reads a graph node made before
        noting began (its origin is then None)."""
        origin_by_id = {id(node): origin for node, origin in alive}
        found = []
        for node, origin in alive:
            for x in node.inputs:
                earlier = origin_by_id.get(id(x))
                if earlier is not None and earlier.iteration < origin.iteration:
                    found.append((node, origin, x, earlier))
                elif earlier is None and x.op is not None and origin.reads_earlier_graph and origin.iteration < iteration:
                    found.append((node, origin, x, None))
        return found

    @staticmethod
    def containers_holding(nodes, own):
        """The first container (list, dict, set, deque) that holds one of ``nodes``, or None.

        The walk goes up through the referrers that wrap a value without being nameable
        containers: tuples, dicts that are not namespaces, objects' attributes (dataclasses
        too), up to ``HOLDER_DEPTH`` levels, so that ``curve.append((step, loss))`` finds
        ``curve``. Returns ``(container, node, path)``: ``path`` leads from the container's element
        to the node, as ``("index", i)``, ``("key", k)`` and ``("attr", name, position)`` steps.
        ``own`` lists the locator's and monitor's own lists, which are never the answer.
        """
        for node in nodes:
            found = _holder_of(node, own)
            if found is not None:
                return found[0], node, found[1]
        return None, None, ()



HOLDER_DEPTH = 4


def _holder_of(node, own):
    """``(container, path)`` for the nearest nameable container above ``node``, or None.

    A list, set or deque is the holder (the user adds to it). A dict that is itself an element of
    another container (the stats dict appended to a log) is not: the walk goes on to the one that
    holds it; a dict that is a value of a named dict is named by a subscript.
    """
    scratch = {id(own)} | {id(mine) for mine in own}  # the walk's own lists and pairs, never holders
    scratch.update(_framework_locals(sys._getframe(1)))

    def referrers_of(value):
        found = gc.get_referrers(value)
        scratch.add(id(found))
        return [r for r in found if id(r) not in scratch]

    def is_element(container):
        for r in referrers_of(container):
            if isinstance(r, (list, tuple, set, collections.deque)) or (isinstance(r, dict) and not _is_namespace(r)):
                return True
        return False

    def nameable(container, depth=HOLDER_DEPTH):
        # NOTE: a value of a named dict is named by a subscript (``hist["train"]["loss"]``)
        if not is_element(container):
            return True
        return depth > 0 and any(
            isinstance(r, dict) and not _is_namespace(r) and nameable(r, depth - 1) for r in referrers_of(container)
        )

    level, seen, fallback = [[node, ()]], {id(node)}, None
    scratch.update((id(level), id(level[0])))
    for _ in range(HOLDER_DEPTH):
        above = []
        scratch.add(id(above))
        for value, path in level:
            for referrer in referrers_of(value):
                if id(referrer) in seen or isinstance(referrer, types.FrameType):
                    continue
                seen.add(id(referrer))
                pair = None
                if isinstance(referrer, _CONTAINER_TYPES):
                    if isinstance(referrer, dict) and _is_namespace(referrer):
                        owner = _owner_of_dict(referrer)
                        if owner is not None:  # an object's attribute: go on to the object
                            name = next((k for k, v in referrer.items() if v is value), None)
                            pair = [owner, (_attribute_step(owner, name),) + path]
                    else:
                        step = _step_into(referrer, value) + path
                        # NOTE: a list, set or deque is where the user adds (``curve.append``); a dict may be
                        # one step's stats inside a log, so only a dict that is no element is the holder
                        if not isinstance(referrer, dict) or nameable(referrer):
                            return referrer, step
                        fallback = fallback or (referrer, step)
                        pair = [referrer, step]
                elif isinstance(referrer, tuple):
                    index = next((i for i, item in enumerate(referrer) if item is value), None)
                    pair = [referrer, (("index", index),) + path]
                elif _is_plain_object(referrer):
                    name = next((k for k, v in vars(referrer).items() if v is value), None)
                    if name is not None:
                        pair = [referrer, (_attribute_step(referrer, name),) + path]
                if pair is not None:
                    scratch.add(id(pair))
                    above.append(pair)
        level = above
        if not level:
            break
    return fallback


def _framework_locals(frame):
    """Ids of the containers the running framework frames inside the user's code hold as locals
    (and of their locals' dicts): the diagnosis's own arguments and scratch, or a tool's wrapper's
    (mutmut keeps a call's arguments in a list), never a holder the user can name."""
    ids = set()
    while frame is not None and is_framework_file(frame.f_code.co_filename):
        local_values = frame.f_locals
        ids.add(id(local_values))
        ids.update(id(value) for value in local_values.values() if isinstance(value, _FRAMEWORK_SCRATCH_TYPES))
        frame = frame.f_back
    return ids


_FRAMEWORK_SCRATCH_TYPES = (list, tuple, set, dict, collections.deque)


def _step_into(container, value):
    """The step from ``container`` to its element ``value`` (empty for lists, sets and deques)."""
    if isinstance(container, dict):
        key = next((k for k, v in container.items() if v is value), None)
        return (("key", key),)
    return ()


def _attribute_step(owner, name):
    fields = getattr(owner, "__dataclass_fields__", None)
    position = list(fields).index(name) if fields and name in fields else None
    return ("attr", name, position)


def _is_plain_object(value):
    """An instance with a ``__dict__`` that is no module, class, function or frame (a graph node has none)."""
    return (
        hasattr(value, "__dict__")
        and not isinstance(value, (type, types.ModuleType, types.FunctionType, types.FrameType, types.MethodType))
        and not isinstance(value, autograd.Value)
    )


def _owner_of_dict(mapping):
    """The object whose ``__dict__`` is ``mapping``, or None (module globals, frame locals)."""
    if "__name__" in mapping:
        return None
    for owner in gc.get_referrers(mapping):
        if _is_plain_object(owner) and getattr(owner, "__dict__", None) is mapping:
            return owner
    return None


def reads_weight(node):
    """Whether ``node`` takes a trained weight as an input: a Parameter, or a leaf that has a gradient."""
    for x in node.inputs:
        if x.op is None and x.requires_grad and (isinstance(x, Parameter) or x.grad is not None):
            return True
    return False


def fed_forward(consumer):
    """Whether a carried value's consumer belongs to the forward pass: a backward() went through
    it, or it reads a weight (as ``h @ W_hh`` does)."""
    return autograd.is_spent(consumer) or reads_weight(consumer)


def _is_namespace(mapping):
    """True for module globals, object ``__dict__``s and frames' locals (one value per name, not a pile)."""
    if "__name__" in mapping:
        return True
    for owner in gc.get_referrers(mapping):
        if isinstance(owner, types.FrameType) or getattr(owner, "__dict__", None) is mapping:
            return True
    return _is_running_frames_locals(mapping)


def _is_running_frames_locals(mapping):
    """Whether ``mapping`` is the locals dict of a function running on this thread's stack.

    Before Python 3.13 a frame keeps one such dict from the first time anything reads
    ``frame.f_locals`` (a debugger, a profile function, this diagnosis), refreshed at each read;
    while the function runs, ``gc`` does not see that its frame holds the dict, so the dict
    would pass for a user's container of the loop's current tensors. Only frames whose local
    names include all of the dict's keys are asked (asking refreshes that frame's dict).
    """
    if not mapping or not all(isinstance(key, str) for key in mapping):
        return False
    keys = mapping.keys()
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if keys <= {*code.co_varnames, *code.co_cellvars, *code.co_freevars} and frame.f_locals is mapping:
            return True
        frame = frame.f_back
    return False


_STACK_DEPTH = 12
