"""Graphs already alive when ``Trainer.fit`` starts: said once, with a likely holder, so a flat
``nodes=168`` in the progress bar is not mistaken for this run's leak (or for nothing)."""
import gc
import sys
import warnings

import needle
from needle import autograd

from .diagnosis.warnings import DiagnosticWarning


class EarlierGraphsWarning(DiagnosticWarning):
    """Graph nodes were alive before training started: kept by earlier code, not by this run."""


def graph_holders(namespaces, limit=3):
    """Names in ``namespaces`` (dicts) bound to a tensor with a graph, largest graphs first.

    Example:
        >>> x = needle.Tensor([1.0])
        >>> graph_holders([{"total": x * 2 + 1, "x": x}])
        ['total']
    """
    found = {}
    for namespace in namespaces:
        for name, value in list(namespace.items()):
            if isinstance(value, needle.Tensor) and value.op is not None and not name.startswith("_"):
                found.setdefault(name, len(autograd.find_topo_sort([value])))
    return sorted(found, key=found.get, reverse=True)[:limit]


def _user_namespaces():
    """The ``__main__`` module's globals and, in IPython, the user namespace: where a script's or
    a cell's variables live."""
    namespaces = []
    main = sys.modules.get("__main__")
    if main is not None:
        namespaces.append(vars(main))
    IPython = sys.modules.get("IPython")
    shell = IPython.get_ipython() if IPython is not None else None
    user_ns = getattr(shell, "user_ns", None)
    if user_ns is not None and all(user_ns is not namespace for namespace in namespaces):
        namespaces.append(user_ns)
    return namespaces


def earlier_graphs_message(live_nodes, holders):
    """The note for ``live_nodes`` nodes alive at ``fit`` start, naming ``holders`` if any."""
    head = f"{live_nodes} graph nodes were alive before training started: kept by earlier code"
    if holders:
        names = ", ".join(f"`{name}`" for name in holders)
        return (
            f"{head}, e.g. {names} (a tensor still holding the graph that computed it). They are not this run's "
            f"leak, but the nodes count starts from them: `del {holders[0]}`, or keep `.detach()`ed values or "
            "Python numbers across cells, to free them."
        )
    return (
        f"{head} (a variable or container still holding tensors with their graph, e.g. a cell's `total += loss`). "
        "They are not this run's leak, but the nodes count starts from them: `del` that variable, or keep "
        "`.detach()`ed values or Python numbers across cells, to free them."
    )


def note_earlier_graphs(stacklevel=3):
    """Warn if graph nodes are alive now (after a garbage collection: graphs in unreachable
    cycles are not kept by anyone) and some were never backpropagated; returns how many are alive.

    NOTE: a graph that a backward() went through whole (the last iteration's ``loss`` of an
    earlier loop) is the ordinary leftover of a training loop, not worth a note; a graph with
    nodes no backward reached (a cell's ``total += loss``, logits computed without ``no_grad``)
    is what makes the node count start high for no visible reason."""
    gc.collect()
    stats = autograd.snapshot()
    live_nodes = stats.live_nodes
    if live_nodes > stats.live_spent_nodes:
        message = earlier_graphs_message(live_nodes, graph_holders(_user_namespaces()))
        warnings.warn(message, EarlierGraphsWarning, stacklevel=stacklevel)
    return live_nodes
