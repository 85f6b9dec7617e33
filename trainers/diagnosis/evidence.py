"""The two kinds of verdict in leak diagnosis, kept apart by name.

A ``Suspicion`` is what the counters suggest (cheap, O(1) per step, may be wrong); a
``Finding`` is what the locator established by looking at the nodes themselves (the user's line,
what holds the graphs, the fix). Only a Finding is ever reported.
"""
import weakref
from typing import Optional, Tuple

# Suspicion kinds
GROWTH = "growth"  # retained graph nodes keep growing in iterations that call backward() (or make no graph)
UNUSED_GROWTH = "unused_growth"  # live graph nodes grow over a long run without any backward()
UNTRAINED_FORWARD = "untrained_forward"  # an iteration made graph nodes and called no backward()

# Finding kinds
ACCUMULATION = "accumulation"  # a value from earlier iterations combined with this one's graph (total += loss)
CARRIED_STATE = "carried_state"  # a state fed back into the next forward without detach() (an RNN's h)
CONTAINER = "container"  # a list/dict/... holds each iteration's graph
HELD = "held"  # graphs are retained, but what holds them was not found
MISSING_NO_GRAD = "missing_no_grad"  # a forward through trained weights with grad mode on and no backward()

Site = Tuple[str, int]


class Suspicion:
    """What the detector's counters suggest at ``iteration``, with the growth measured so far.

    ``nodes``/``nbytes``: growth of live graph nodes and their bytes between the last two growth
    events, ``every`` iterations apart; ``used_by_backward``: the growth includes nodes a
    backward() already went through.
    """

    __slots__ = ("kind", "iteration", "nodes", "nbytes", "every", "used_by_backward", "baseline", "signature")

    def __init__(self, kind, iteration, nodes=0, nbytes=0, every=1, used_by_backward=False, baseline=0, signature=None):
        self.kind = kind
        self.signature = signature  # for untrained_forward: (nodes made, nodes made - nodes freed) that iteration
        self.baseline = baseline  # live graph nodes the growth is measured against
        self.iteration = iteration
        self.nodes = nodes
        self.nbytes = nbytes
        self.every = every
        self.used_by_backward = used_by_backward

    def __repr__(self):
        return f"Suspicion({self.kind!r}, iteration={self.iteration}, nodes={self.nodes}, every={self.every})"


class Finding:
    """What the locator established: the kind of problem, the user's line, what holds the graph.

    Attributes:
        kind: ``"accumulation"``, ``"carried_state"``, ``"container"``, ``"held"`` or ``"missing_no_grad"``.
        site: ``(filename, lineno)`` of the line the warning names (None when not caught).
        created_site: where the retained tensors are made (for containers and held graphs).
        container_name: the user's expression for the container (``hist["train"]["loss"]``).
        holders: the names that carry a state across iterations (``("h",)``), for carried states.
        state_is_tuple: whether the carried state is a tuple of tensors, such as an LSTM's ``(h, c)``.
        scalar: whether the retained tensor has one element (so ``float(t.numpy())`` fits).
        retained_nodes: the graph nodes made in one iteration that are still alive (kept only for a
            reported finding, so that the retained subgraph can be shown); empty for no_grad.
        iteration: the iteration ``retained_nodes`` were made in.
        nodes_made, bytes_made, kept_alive: for ``missing_no_grad``, the graph nodes one evaluation
            iteration built, the bytes they held, and whether any outlived the iteration.
    """

    def __init__(
        self,
        kind: str,
        site: Optional[Site],
        created_site: Optional[Site] = None,
        container_name: Optional[str] = None,
        holders: Tuple[str, ...] = (),
        state_is_tuple: bool = False,
        scalar: bool = False,
        retained_nodes: tuple = (),
        iteration: Optional[int] = None,
    ):
        self.kind = kind
        self.site = site
        self.created_site = created_site
        self.container_name = container_name
        self.holders = holders
        self.holder_path = ()  # from the container's element to the tensor: ("index", i), ("key", k), ("attr", name, position)
        self.state_is_tuple = state_is_tuple
        self.scalar = scalar
        self.retained_nodes = retained_nodes
        self.frozen_text = None  # explain()'s text, drawn when the finding was reported
        self.frozen_dot = None  # the retained graph as DOT text, drawn then
        self.iteration = iteration
        self.nodes_made = 0
        self.bytes_made = 0
        self.kept_alive = False

    @property
    def retained_nodes(self) -> tuple:
        """The retained nodes still alive: the finding holds them weakly, so it keeps no graph alive
        (once the user's own reference goes, this is empty and ``explain()`` shows what was drawn)."""
        nodes = tuple(node for node in (ref() for ref in self._retained_refs) if node is not None)
        return nodes if len(nodes) == len(self._retained_refs) else ()

    @retained_nodes.setter
    def retained_nodes(self, nodes) -> None:
        self._retained_refs = tuple(weakref.ref(node) for node in nodes)

    @property
    def key(self):
        """What makes two findings the same problem (for ``warn="once"``)."""
        return (self.kind, self.site or self.created_site, self.container_name)

    def __repr__(self):
        return f"Finding({self.kind!r}, site={self.site}, retained_nodes={len(self.retained_nodes)})"
