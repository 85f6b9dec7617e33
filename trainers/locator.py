"""Finds the user's line that keeps old graphs alive, once a leak is suspected.

While active it records, for every new graph node, the iteration it was made in and the user's
line that made it (through needle's node observers: nothing is recorded, and nothing costs, in a
healthy loop). A node that survives a whole later iteration is retained. Then:

- a retained node whose input comes from an earlier iteration marks the line that carries the
  graph forward (``total = total + loss``, an EMA, a recurrent state, running statistics);
- otherwise a container (a list, a dict) holds the retained graphs: it is named, and the line
  that adds to it is caught by watching the container's methods for one iteration.
"""
import collections
import gc
import sys
import weakref

from needle import autograd

from .sites import is_framework_file, user_frame, user_site

_CONTAINER_TYPES = (list, dict, set, collections.deque)
_ADDING_METHODS = {"append", "extend", "insert", "appendleft", "add", "update", "setdefault", "__setitem__"}


class Finding:
    """What the locator found: the kind of leak, the user's line, and the container if any."""

    def __init__(self, kind, site, container_name=None, created_site=None, container=None):
        self.kind = kind  # "carried", "container", or "retained" (held, holder not found)
        self.site = site
        self.container_name = container_name
        self.created_site = created_site
        self.container = container  # kept only until the adding line is caught

    @property
    def key(self):
        return (self.kind, self.site, self.container_name)


class LeakLocator:
    """Records new graph nodes with their iteration and user line, and explains what is retained."""

    def __init__(self):
        self.active = False
        self.iteration = 0
        self.started_at = 0
        self._nodes = []  # (weak reference, iteration or None for gradient nodes, site)
        self._container = None
        self._container_adds = collections.Counter()
        self._previous_profiler = None

    # ---- recording ------------------------------------------------------------------------
    def start(self, iteration):
        self.active = True
        self.iteration = self.started_at = iteration
        self._nodes = []
        autograd.add_node_observer(self._record)

    def _record(self, node):
        # NOTE: a node that backward() made (a gradient graph) is recorded with iteration None.
        made_in = None if _inside_backward() else self.iteration
        self._nodes.append((weakref.ref(node), made_in, user_site(2)))

    def advance(self, iteration):
        self.iteration = iteration

    def stop(self):
        if self.active:
            autograd.remove_node_observer(self._record)
        self._stop_watching_container()
        self.active = False
        self._nodes = []

    def iterations_recorded(self, iteration):
        return iteration - self.started_at

    # ---- explaining -----------------------------------------------------------------------
    def creation_sites(self, iteration=None):
        """How many nodes each user line made (in one iteration, if given)."""
        counts = collections.Counter()
        for _, made_in, site in self._nodes:
            if site is not None and (iteration is None or made_in == iteration):
                counts[site] += 1
        return counts

    def live_made_in(self, iteration):
        """How many nodes made in ``iteration`` are alive, and the bytes they own."""
        count = total = 0
        for ref, made_in, _ in self._nodes:
            node = ref()
            if node is not None and made_in == iteration:
                count += 1
                total += autograd.owned_bytes(node)
        return count, total

    def find(self, iteration):
        """Explain the retained nodes at the end of ``iteration``; None if nothing is retained."""
        gc.collect()  # graphs in reference cycles are garbage, not retained
        alive = []
        for ref, made_in, site in self._nodes:
            node = ref()
            if node is not None and made_in is not None:
                # NOTE: gradient graphs (a node's .grad) reach back into every graph backward() went
                # through; the lines that build them are not the user's, so only forward nodes count.
                alive.append((node, made_in, site))
        retained = [entry for entry in alive if entry[1] <= iteration - 2]
        if not retained:
            return None
        made_in_by_id = {id(node): made_in for node, made_in, _ in alive}
        carried = collections.Counter()
        for node, made_in, site in alive:
            for x in node.inputs:
                if x.op is not None and made_in_by_id.get(id(x), -1) < made_in and site is not None:
                    carried[site] += 1
        if carried:
            site = max(carried.items(), key=lambda item: (item[1], -item[0][1]))[0]
            return Finding("carried", site)
        return self._find_container(retained, made_in_by_id, alive)

    def _find_container(self, retained, made_in_by_id, alive):
        used_as_input = {id(x) for node, _, _ in alive for x in node.inputs}
        roots = [entry for entry in retained if id(entry[0]) not in used_as_input]
        ours = (self._nodes, alive, retained, roots)
        for node, _, site in roots:
            for referrer in gc.get_referrers(node):
                if isinstance(referrer, _CONTAINER_TYPES) and not any(referrer is own for own in ours):
                    if isinstance(referrer, dict) and _is_namespace(referrer):
                        continue
                    name = _name_of(referrer)
                    return Finding("container", None, container_name=name, created_site=site, container=referrer)
        site = roots[0][2] if roots else retained[0][2]
        return Finding("retained", site)

    # ---- catching the line that adds to a container -----------------------------------------
    def watch_container(self, container):
        """Note which user line calls an adding method of ``container`` until the next step."""
        self._container = container
        self._container_adds = collections.Counter()
        self._previous_profiler = sys.getprofile()
        sys.setprofile(self._profile)

    def _profile(self, frame, event, arg):
        if event == "c_call" and getattr(arg, "__self__", None) is self._container:
            if arg.__name__ in _ADDING_METHODS and not is_framework_file(frame.f_code.co_filename):
                self._container_adds[(frame.f_code.co_filename, frame.f_lineno)] += 1

    def container_site(self):
        self._stop_watching_container()
        if not self._container_adds:
            return None
        return self._container_adds.most_common(1)[0][0]

    def _stop_watching_container(self):
        if self._container is not None:
            sys.setprofile(self._previous_profiler)
            self._container = None


def _is_namespace(mapping):
    """True for module globals and object ``__dict__``s (they hold one value per name, not a pile)."""
    return "__name__" in mapping or any(getattr(o, "__dict__", None) is mapping for o in gc.get_referrers(mapping))


def _name_of(container):
    """The name the user's code knows ``container`` by: a local, a global, or ``obj.attribute``."""
    frame = user_frame(2)
    while frame is not None:
        for namespace in (frame.f_locals, frame.f_globals):
            for name, value in namespace.items():
                if value is container:
                    return name
        frame = frame.f_back
    for referrer in gc.get_referrers(container):
        if isinstance(referrer, dict):
            for owner in gc.get_referrers(referrer):
                if getattr(owner, "__dict__", None) is referrer:
                    for name, value in referrer.items():
                        if value is container:
                            return f"{type(owner).__name__}.{name}"
    return f"a {type(container).__name__}"


def _inside_backward():
    """True when the node being made comes from a backward() pass (a gradient graph)."""
    frame = sys._getframe(2)
    while frame is not None and is_framework_file(frame.f_code.co_filename):
        if frame.f_code is _BACKWARD_CODE:
            return True
        frame = frame.f_back
    return False


_BACKWARD_CODE = autograd.compute_gradient_of_variables.__code__
