"""See the graph: print it, count it, draw it.

The course teaches autograd by following ``v4.inputs`` back to the leaves; these helpers do that
for any tensor. Nothing here computes data or changes the graph.

- :func:`print_graph` / :func:`node_line`: the graph as text (the lecture's ``print_node``).
- :func:`graph_stats`: nodes by op, bytes held, depth.
- :func:`to_dot`: Graphviz DOT text (no dependency); :func:`render` writes SVG/PNG and
  :func:`graph` displays inline in Jupyter, both through the optional ``graphviz`` package
  (``pip install 'needle-dl[viz]'``).
- :func:`expression`: one line that spells a subgraph as nested calls, used by leak warnings.
"""
from .graph_walk import GraphStats, graph_stats
from .text import format_graph, node_line, print_graph
from .dot import GraphvizMissingError, graph, render, to_dot
from .expression import expression

__all__ = [
    "GraphStats",
    "GraphvizMissingError",
    "expression",
    "format_graph",
    "graph",
    "graph_stats",
    "node_line",
    "print_graph",
    "render",
    "to_dot",
]
