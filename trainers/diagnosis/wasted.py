"""Wasted graphs: forwards with grad mode on whose graph served no optimizer.

Two facts come from needle's O(1) counters (``needle.autograd.snapshot``), read every step:

- ``wasted_nodes_freed``: forward graph nodes freed with no backward() through them that read a
  parameter (an ``nn.Parameter``, or a leaf with a ``.grad``): an evaluation without ``no_grad``,
  in any iteration, one that also trains or not, inside a helper or a callback;
- ``frozen_gradients``: gradients a backward() computed for parameters that no live optimizer
  updates (``needle.updated_parameters``): a frozen model (a feature extractor, a teacher) run
  with grad mode on, whose graph the backward goes through only to fill gradients nobody uses.
  Nothing is counted while no optimizer exists (plain autograd), nor for parameters with
  ``requires_grad=False`` (they get no gradient); nothing is warned for steps in which no
  optimizer stepped (a lesson's hand-written update, with an old optimizer still alive).

Threshold (what is warned): a freed graph is warned when it reads a parameter and no node of
it was spent (a branch of a trained graph, say an unused auxiliary output, is not). A graph that
reads no parameter (a metric on already-computed logits: ``exp(logits)``, an accuracy) costs
only what it computed from values the training step made anyway; it is harmless and never
warned, only counted (steps that also waste a graph through parameters are not, since their
nodes cannot be told apart by the counters) and reported once in ``MemoryMonitor.summary()``
with the line that made it.

When a counter moves, a graph observer records where the nodes that read parameters are made
and hears each one freed unspent or backpropagated; the next such graph names its line (the
loop's line that ran the forward, the call of a helper; in a Trainer callback, the callback's
line). The pattern is thus warned at its second occurrence; when the first watch ends before
the pattern recurs, the next lasts twice the gap seen, so a rarer pattern is warned by its third.

Example:
    >>> import needle as ndl
    >>> from trainers.diagnosis.wasted import WastedGraphs, counts_between
    >>> w = ndl.nn.Parameter(ndl.Tensor([1.0, 2.0]))
    >>> before = ndl.autograd.snapshot()
    >>> _ = float((w * w).sum().numpy())  # an evaluation with grad mode on
    >>> counts = counts_between(before, ndl.autograd.snapshot())
    >>> counts.nodes, counts.frozen
    (1, 0)
    >>> graphs = WastedGraphs()
    >>> graphs.observe(0, counts, None) is None, graphs.watching_until
    (True, 64)
    >>> graphs.stop()
"""
import collections
import sys
import weakref
from typing import NamedTuple

from needle import graph_observers, updated_parameters

from .locator import reads_weight
from .report import frozen_model_message, wasted_graph_message
from .sites import is_framework_file

WATCH_ITERATIONS = 64  # the shortest watch for the next wasted graph, once the counters show one
SMALL_SAMPLES = 3  # short watches that look for the line of a small graph, at most
_ANCESTORS_CHECKED = 256
_STACK_DEPTH = 16


class WastedCounts(NamedTuple):
    """What the counters say one step wasted: graph nodes through parameters freed unspent and their
    bytes, gradients of frozen parameters, and the nodes and bytes of small graphs (reading no parameter)."""

    nodes: int = 0
    nbytes: int = 0
    frozen: int = 0
    small_nodes: int = 0
    small_bytes: int = 0
    backward_calls: int = 0


def counts_between(previous, counters):
    """The :class:`WastedCounts` of the step between two ``snapshot()`` readings."""
    nodes = counters.wasted_nodes_freed - previous.wasted_nodes_freed
    nbytes = counters.wasted_bytes_freed - previous.wasted_bytes_freed
    unspent = counters.unspent_nodes_freed - previous.unspent_nodes_freed
    unspent_bytes = counters.unspent_bytes_freed - previous.unspent_bytes_freed
    frozen = counters.frozen_gradients - previous.frozen_gradients
    backward_calls = counters.backward_calls - previous.backward_calls
    return WastedCounts(nodes, nbytes, frozen, unspent - nodes, unspent_bytes - nbytes, backward_calls)


class WastedGraphs(graph_observers.GraphObserver):
    """Watches for wasted graphs once the counters show one; ``observe`` returns a site or None.

    After a site is returned, ``message(site)`` is its NoGradWarning text.
    """

    def __init__(self):
        self.watching_until = None
        self.found = collections.Counter()  # site -> wasted nodes freed there
        self.frozen_found = collections.Counter()  # site -> frozen-parameter nodes backpropagated
        self.nodes_wasted = 0
        self.bytes_wasted = 0
        self.frozen_gradients = 0
        self.small_nodes = 0  # over the whole run, from the counters
        self.small_bytes = 0
        self.small_sites = collections.Counter()  # site -> small nodes freed there (while sampling)
        self._small_samples_left = SMALL_SAMPLES
        self._sampling_small = False
        self._reported_kind = {}  # site -> "frozen" or "wasted", for message()
        self._made = {}  # id(node) -> creation stack entries
        self._frozen_made = {}  # id(node) -> (weak ref, creation stack) of nodes reading frozen parameters
        self._loop_code = []
        self._skip = 0
        self._reports = 0
        self._fruitless = 0  # watches in a row that saw the counters move and found no site
        self._moved_while_watching = False
        self._last_move = None  # iteration at which the latest occurrence began
        self._gap = 0  # iterations between the last two occurrences
        self._optimizer_steps = updated_parameters.steps()
        self._in_evaluation_run = False  # the last step wasted a graph and called no backward()

    def observe(self, iteration, wasted_now, caller_frame):
        """Advance one step; ``wasted_now``: the step's :class:`WastedCounts` (or its first fields)."""
        counts = WastedCounts(*wasted_now)
        steps, self._optimizer_steps = self._optimizer_steps, updated_parameters.steps()
        if counts.frozen and steps == self._optimizer_steps:  # no optimizer stepped: nothing trains here
            counts = counts._replace(frozen=0)
        if counts.small_nodes > 0 and counts.nodes == 0 and counts.frozen == 0:
            self.small_nodes += counts.small_nodes
            self.small_bytes += counts.small_bytes
        moved = counts.nodes > 0 or counts.frozen > 0
        # NOTE: one occurrence is one training iteration that wastes a graph, or one run of
        # iterations without backward() that do (one validation loop).
        occurrence = moved and not (counts.backward_calls == 0 and self._in_evaluation_run)
        self._in_evaluation_run = moved and counts.backward_calls == 0
        if occurrence:
            if self._last_move is not None:
                self._gap = iteration - self._last_move
            self._last_move = iteration
        if self.watching_until is not None:
            return self._watching(iteration, counts, moved, caller_frame)
        if occurrence:
            if self._skip > 0:
                self._skip -= 1
                return None
            self.nodes_wasted, self.bytes_wasted, self.frozen_gradients = counts.nodes, counts.nbytes, counts.frozen
            self._start(iteration + max(WATCH_ITERATIONS, 2 * self._gap + 2), caller_frame, small=False)
        elif not moved and counts.small_nodes > 0 and not self.small_sites and self._small_samples_left > 0:
            self._small_samples_left -= 1
            self._start(iteration + 2, caller_frame, small=True)  # a graph made next step may be freed the step after
        return None

    def _watching(self, iteration, counts, moved, caller_frame):
        self._loop_code = _user_code(caller_frame)
        if self.frozen_found or self.found:
            kind, found = ("frozen", self.frozen_found) if self.frozen_found else ("wasted", self.found)
            site = found.most_common(1)[0][0]
            self._reported_kind[site] = kind if kind == "frozen" or counts.backward_calls > 0 else "evaluation"
            self.stop()
            self._reports += 1
            self._fruitless = 0
            self._skip = min(2 ** self._reports - 1, 15)
            return site
        if self._sampling_small:
            if moved:  # a wasted graph needs the watch: it starts over for it
                self.stop()
                self.nodes_wasted, self.bytes_wasted, self.frozen_gradients = counts.nodes, counts.nbytes, counts.frozen
                self._start(iteration + max(WATCH_ITERATIONS, 2 * self._gap + 2), caller_frame, small=False)
            elif self.small_sites or iteration >= self.watching_until:
                self.stop()
            return None
        if moved:
            self._moved_while_watching = True
        if iteration >= self.watching_until:
            fruitless = self._moved_while_watching
            self.stop()
            if fruitless:  # the counters moved, yet no graph was worth a warning: check less often
                self._fruitless += 1
                self._skip = min(2 ** self._fruitless - 1, 15)
        return None

    def message(self, site):
        """The NoGradWarning text for a site ``observe`` returned."""
        if self._reported_kind.get(site) == "frozen":
            return frozen_model_message(self.frozen_gradients, site)
        trained = self._reported_kind.get(site) != "evaluation"
        return wasted_graph_message(self.nodes_wasted, self.bytes_wasted, site, trained)

    def small_summary(self):
        """The summary line about small graphs, or None when there were none."""
        if self.small_nodes <= 0:
            return None
        from .report import megabytes
        from .sites import describe_site

        where = f", at {describe_site(self.small_sites.most_common(1)[0][0])}" if self.small_sites else ""
        return (
            f"  small graphs: {self.small_nodes} graph nodes ({megabytes(self.small_bytes)}) were built with grad on "
            f"and never used, reading no parameter{where}; harmless (e.g. a metric on logits), "
            "`with needle.no_grad():` there would skip them"
        )

    def _start(self, until, caller_frame, small):
        self.watching_until = until
        self._sampling_small = small
        self._moved_while_watching = False
        self._loop_code = _user_code(caller_frame)
        graph_observers.add_observer(self)

    def stop(self):
        if self.watching_until is not None:
            graph_observers.remove_observer(self)
        self.watching_until = None
        self._sampling_small = False
        self.found = collections.Counter()
        self.frozen_found = collections.Counter()
        self._made = {}
        self._frozen_made = {}

    # ---- the observer ---------------------------------------------------------------------
    def node_made(self, node):
        if graph_observers.in_backward():
            return
        if self._sampling_small:
            self._made[id(node)] = _creation_stack(sys._getframe(1))
            return
        if not reads_weight(node):
            return
        stack = _creation_stack(sys._getframe(1))
        self._made[id(node)] = stack
        if _reads_frozen_parameter(node):
            self._frozen_made[id(node)] = (weakref.ref(node), stack)

    def node_freed_unspent(self, node, reads_parameter):
        stack = self._made.pop(id(node), None)
        self._frozen_made.pop(id(node), None)
        if stack is None:
            return
        if self._sampling_small:
            if not reads_parameter and not _reaches_parameter(node):
                self.small_sites[_forward_site(stack, self._loop_code)] += 1
            return
        if reads_parameter and not _reaches_spent(node):
            self.found[_forward_site(stack, self._loop_code)] += 1

    def backward_finished(self, output, traversed):
        if not self._frozen_made:
            return
        for node in traversed:
            entry = self._frozen_made.get(id(node))
            if entry is not None and entry[0]() is node:
                self.frozen_found[_forward_site(entry[1], self._loop_code)] += 1
        self._frozen_made = {}


def _creation_stack(frame):
    """The user frames on the stack, innermost first: [code, (file, line), called by the framework]."""
    stack = []
    while frame is not None and len(stack) < _STACK_DEPTH:
        code = frame.f_code
        if not is_framework_file(code.co_filename):
            stack.append([code, (code.co_filename, frame.f_lineno), False])
        elif stack:
            stack[-1][2] = True  # this user frame was called by needle or trainers
        frame = frame.f_back
    return stack


def _reads_frozen_parameter(node):
    """Whether ``node`` reads a trainable parameter that no live optimizer updates."""
    if not updated_parameters.any_optimizer():
        return False
    for x in node.inputs:
        if x.op is None and x._is_parameter and x.requires_grad and not updated_parameters.is_updated(x):
            return True
    return False


def _user_code(frame, depth=12):
    """The codes of the user frames from the one that stepped the monitor outward (innermost first)."""
    codes = []
    if frame is not None and is_framework_file(frame.f_code.co_filename):
        return codes  # a Trainer steps the monitor: the forward's line is found from its own stack
    while frame is not None and len(codes) < depth:
        if not is_framework_file(frame.f_code.co_filename):
            codes.append(frame.f_code)
        frame = frame.f_back
    return codes


def _forward_site(stack, loop_code):
    """The loop's line when the loop steps the monitor; else the outermost user line a framework
    frame called (a Trainer callback's line); else the innermost user line."""
    for stepping in loop_code:
        for code, site, _ in stack:
            if code is stepping:
                return site
    called = [site for _, site, by_framework in stack if by_framework]
    if called:
        return called[-1]
    return stack[0][1] if stack else None


def _ancestors(node, through_spent=True):
    """The values ``node`` was computed from, up to a bound (only up to spent nodes, unless ``through_spent``)."""
    seen, pending = set(), list(node.inputs)
    while pending and len(seen) < _ANCESTORS_CHECKED:
        x = pending.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        if through_spent or not x._spent:
            pending.extend(x.inputs)


def _reaches_spent(node):
    """Whether a backward() went through some node this one was computed from (a trained graph's branch)."""
    return any(x.op is not None and x._spent for x in _ancestors(node))


def _reaches_parameter(node):
    """Whether this node was computed from a parameter through unspent nodes (part of a wasted graph)."""
    return any(x.op is None and x.requires_grad and x._is_parameter for x in _ancestors(node, through_spent=False))
