"""The graph as text: the lecture's ``print_node`` for one node, and ``print_graph`` for all."""
import sys
from typing import Dict, List, Optional

import numpy

from ..autograd import Value
from .graph_walk import (
    GraphView,
    node_device,
    node_dtype,
    node_kind,
    node_shape,
    require_graph_value,
    view_graph,
)

VALUES_SHOWN = 4
"""How many leading elements a node line shows."""


def _values(node: Value) -> str:
    data = node.cached_data
    if data is None:
        return "(not computed yet)"
    if isinstance(data, tuple):
        return f"({len(data)} arrays)"
    flat = numpy.asarray(data.numpy()).reshape(-1)
    head = numpy.array2string(flat[:VALUES_SHOWN], precision=4, separator=" ", threshold=VALUES_SHOWN + 1)
    return head[:-1] + " …]" if flat.size > VALUES_SHOWN else head


def _describe(node: Value, input_names: List[str], values: bool) -> str:
    kind = node_kind(node)
    if node.op is None:
        head = kind
    else:
        head = f"{kind}({', '.join(input_names)})"
    shape = node_shape(node)
    parts = [head, f"shape={shape}" if shape is not None else "shape=?", node_dtype(node), node_device(node)]
    parts.append(f"requires_grad={node.requires_grad}")
    if values:
        parts.append(_values(node))
    return "  ".join(parts)


def node_line(node: Value, names: Optional[Dict[int, str]] = None, values: bool = True) -> str:
    """One node as a line: its id, op and inputs' ids, shape, dtype, device, requires_grad, data.

    The lecture's ``print_node``. Without ``names`` the ids are Python's ``id()``; ``print_graph``
    passes its short names (``v1``, ``v2``, …).

    Example:
        >>> import needle as ndl
        >>> v1 = ndl.Tensor([0.0])
        >>> v2 = ndl.exp(v1)
        >>> ndl.viz.node_line(v2, names={id(v1): "v1", id(v2): "v2"})
        'v2 = Exp(v1)  shape=(1,)  float32  cpu  requires_grad=True  [1.]'
    """
    require_graph_value(node, "node_line")

    def name(value):
        return names[id(value)] if names is not None else f"id{id(value)}"

    return f"{name(node)} = {_describe(node, [name(x) for x in node.inputs], values)}"


def format_graph(
    tensor: Value,
    max_nodes: int = 50,
    values: bool = True,
    python_ids: bool = False,
    collapse: bool = True,
) -> str:
    """The text that :func:`print_graph` prints."""
    require_graph_value(tensor, "format_graph")
    view = view_graph(tensor, collapse=collapse)
    return "\n".join(_graph_lines(view, max_nodes, values, python_ids))


def _graph_lines(view: GraphView, max_nodes: int, values: bool, python_ids: bool) -> List[str]:
    visible = [node for node in view.order if id(node) not in view.hidden]
    lines = [f"graph of {view.name(view.root)}: {len(view.order)} nodes, {sum(n.op is not None for n in view.order)} ops"
             + (f", {len(view.order) - len(visible)} collapsed" if len(visible) < len(view.order) else "")]
    shown = 0
    for node in reversed(view.order):
        chain = view.collapsed.get(id(node))
        if chain is not None:
            hidden_rungs = chain.nodes[2:-1]
            lines.append(
                f"  … {len(hidden_rungs)} more {chain.kind} nodes like {view.name(chain.nodes[-1])} "
                f"({view.name(hidden_rungs[0])} … {view.name(hidden_rungs[-1])}), "
                "each built the same way from the one before (one per iteration)"
            )
        if id(node) in view.hidden:
            continue
        if shown == max_nodes:
            lines.append(f"  … {len(visible) - shown} more nodes not shown (max_nodes={max_nodes})")
            break
        line = "  " + node_line(node, view.names, values)
        if python_ids:
            line += f"  id={id(node):#x}"
        users = len(view.consumers[id(node)])
        if users > 1:
            line += f"  (used by {users} nodes)"
        lines.append(line)
        shown += 1
    return lines


def print_graph(
    tensor: Value,
    max_nodes: int = 50,
    values: bool = True,
    python_ids: bool = False,
    collapse: bool = True,
    file=None,
) -> None:
    """Print the graph that produced ``tensor``, from the output back to the leaves.

    Nodes are named ``v1, v2, …`` in topological order (inputs first), so the lecture's
    ``v1 … v4`` print under their own names. Each line shows the op
    (or ``leaf``/``const``/``Parameter``), the names of its inputs, shape, dtype, device,
    ``requires_grad`` and, with ``values``, the first few elements. A node used by several others
    is printed once and referred to by name. A long run of nodes built the same way, one from the
    other (the graph a loop accumulates), is collapsed into one line.

    Args:
        tensor: the output whose graph to show.
        max_nodes: at most this many node lines; the rest are counted.
        values: show the first few elements of each node's data.
        python_ids: add each node's Python ``id()``.
        collapse: collapse repeated chains (``False`` prints every node).
        file: where to print (default ``sys.stdout``).

    Example:
        >>> import needle as ndl
        >>> v1 = ndl.Tensor([0.0])
        >>> v2 = ndl.exp(v1)
        >>> v3 = v2 + 1
        >>> v4 = v2 * v3
        >>> ndl.viz.print_graph(v4)
        graph of v4: 4 nodes, 3 ops
          v4 = EWiseMul(v2, v3)  shape=(1,)  float32  cpu  requires_grad=True  [2.]
          v3 = AddScalar(v2)  shape=(1,)  float32  cpu  requires_grad=True  [2.]
          v2 = Exp(v1)  shape=(1,)  float32  cpu  requires_grad=True  [1.]  (used by 2 nodes)
          v1 = leaf  shape=(1,)  float32  cpu  requires_grad=True  [0.]
    """
    require_graph_value(tensor, "print_graph")
    print(format_graph(tensor, max_nodes, values, python_ids, collapse), file=file or sys.stdout)
