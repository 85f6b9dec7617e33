"""Wasted graphs: forwards through parameters whose graph was freed with no backward() through it.

The fact comes from needle: ``snapshot().wasted_nodes_freed`` counts forward graph nodes freed
unspent that read a parameter (an ``nn.Parameter`` or a leaf with a ``.grad``). That is an
evaluation without ``no_grad``, in any iteration, one that also trains or not. Threshold: a
wasted graph is warned when it reaches a parameter and no node of its graph was spent (so a
branch of a trained graph, say an unused auxiliary output, is not); graphs that read no
parameter (metrics on already-computed logits) are only counted, for ``summary()``.

When the counter moves, a graph observer records where parameter-reading nodes are made, and
hears each one freed unspent; the next such graph names its line (the loop's line that ran the
forward, the call of a helper; in a Trainer callback, the callback's line).
"""
import collections
import sys

from needle import graph_observers

from .locator import reads_weight
from .sites import is_framework_file

WATCH_ITERATIONS = 64  # how long one watch waits for the next wasted graph
_ANCESTORS_CHECKED = 256


class WastedGraphs(graph_observers.GraphObserver):
    """Watches for wasted graphs once the counters show one; ``observe`` returns a site or None."""

    def __init__(self):
        self.watching_until = None
        self.found = collections.Counter()  # site -> wasted nodes freed there
        self.nodes_wasted = 0
        self.bytes_wasted = 0
        self._made = {}  # id(node) -> creation stack entries
        self._loop_code = []
        self._skip = 0
        self._reports = 0

    def observe(self, iteration, wasted_now, caller_frame):
        """Advance one step; ``wasted_now``: (nodes, bytes) the counters say were wasted this step."""
        if self.watching_until is None:
            if wasted_now[0] == 0:
                return None
            if self._skip > 0:
                self._skip -= 1
                return None
            self.nodes_wasted, self.bytes_wasted = wasted_now
            self._start(iteration, caller_frame)
            return None
        self._loop_code = _user_code(caller_frame)
        if self.found:
            site = self.found.most_common(1)[0][0]
            self.stop()
            self._reports += 1
            self._skip = min(2 ** self._reports - 1, 15)
            return site
        if iteration >= self.watching_until:
            self.stop()
            self._skip = 3
        return None

    def _start(self, iteration, caller_frame):
        self.watching_until = iteration + WATCH_ITERATIONS
        self._loop_code = _user_code(caller_frame)
        graph_observers.add_observer(self)

    def stop(self):
        if self.watching_until is not None:
            graph_observers.remove_observer(self)
        self.watching_until = None
        self.found = collections.Counter()
        self._made = {}

    # ---- the observer ---------------------------------------------------------------------
    def node_made(self, node):
        if graph_observers.in_backward() or not reads_weight(node):
            return
        stack, frame, called_from_framework = [], sys._getframe(1), False
        while frame is not None and len(stack) < 16:
            code = frame.f_code
            user = not is_framework_file(code.co_filename)
            if user:
                stack.append([code, (code.co_filename, frame.f_lineno), False])
            elif stack:
                stack[-1][2] = True  # this user frame was called by needle or trainers
            frame = frame.f_back
        self._made[id(node)] = stack

    def node_freed_unspent(self, node, reads_parameter):
        stack = self._made.pop(id(node), None)
        if not reads_parameter or stack is None or _reaches_spent(node):
            return
        self.found[_forward_site(stack, self._loop_code)] += 1


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


def _reaches_spent(node):
    """Whether a backward() went through some node this one was computed from (a trained graph's branch)."""
    seen, pending = set(), list(node.inputs)
    while pending and len(seen) < _ANCESTORS_CHECKED:
        x = pending.pop()
        if id(x) in seen or x.op is None:
            continue
        seen.add(id(x))
        if x._spent:
            return True
        pending.extend(x.inputs)
    return False
