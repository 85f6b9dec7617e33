"""The graph as Graphviz DOT text, and drawn through the optional ``graphviz`` package."""
import importlib.util
import os
import shutil
import tempfile

from ..autograd import Value
from .graph_walk import GraphView, is_parameter, node_dtype, node_kind, node_shape, require_graph_value, view_graph
from .text import format_graph

INSTALL_HINT = (
    "install the graphviz Python package (pip install 'needle-dl[viz]', or pip install graphviz) "
    "and the Graphviz programs that provide the `dot` command (apt-get install graphviz, "
    "brew install graphviz, or conda install graphviz); ndl.viz.to_dot(tensor) gives the DOT "
    "text without either"
)


class GraphvizMissingError(ImportError):
    """Drawing needs the ``graphviz`` Python package and the Graphviz ``dot`` program."""


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _tensor_label(view: GraphView, node: Value) -> str:
    shape = node_shape(node)
    shape_text = "?" if shape is None else "×".join(str(d) for d in shape) if shape else "scalar"
    role = f" {node_kind(node)}" if node.op is None else ""
    return f"{view.name(node)}{role}\n{shape_text} {node_dtype(node)}"


def to_dot(tensor: Value, max_nodes: int = 200, collapse: bool = True, name: str = "needle") -> str:
    """The graph that produced ``tensor`` as Graphviz DOT text (no dependency needed).

    Tensors are ellipses labelled with their name, shape and dtype; each op is a box between its
    inputs and its output. Parameters are filled blue, other leaves white, constants grey; the
    output has a double outline. A repeated chain (what a loop accumulates) is one dashed box.

    Args:
        tensor: the output whose graph to draw.
        max_nodes: at most this many tensors are drawn; the rest are counted in a note.
        collapse: collapse repeated chains into one box.
        name: the graph's name in the DOT text.

    Example:
        >>> import needle as ndl
        >>> x = ndl.Tensor([1.0, 2.0])
        >>> print(ndl.viz.to_dot(x * x).splitlines()[0])
        digraph needle {
    """
    require_graph_value(tensor, "to_dot")
    view = view_graph(tensor, collapse=collapse)
    lines = [
        f"digraph {name} {{",
        "  rankdir=BT;",
        '  node [fontname="Helvetica", fontsize=10];',
    ]
    drawn = set()
    for node in reversed(view.order):
        if id(node) in view.hidden:
            continue
        if len(drawn) == max_nodes:
            left = sum(1 for n in view.order if id(n) not in view.hidden) - len(drawn)
            lines.append(f'  more [shape=note, label="{left} more tensors not drawn (max_nodes={max_nodes})"];')
            break
        drawn.add(id(node))
        lines.extend(_node_statements(view, node))
    for chain_end, chain in view.collapsed.items():
        if id(chain.nodes[1]) not in drawn:
            continue
        box = f"chain_{view.name(chain.nodes[-2])}"
        rungs = len(chain.nodes) - 3
        label = _quote(f"× {rungs} {chain.kind}" + "\n(one per iteration)")
        lines.append(f"  {box} [shape=box, style=dashed, label={label}];")
        lines.append(f"  {view.name(chain.nodes[1])} -> {box};")
    for node in view.order:
        if id(node) not in drawn or node.op is None:
            continue
        for x in node.inputs:
            source = view.name(x) if id(x) in drawn else _chain_box_for(view, x)
            if source is not None:
                lines.append(f"  {source} -> op_{view.name(node)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _chain_box_for(view: GraphView, hidden_input: Value):
    chain = view.collapsed.get(id(hidden_input))
    return f"chain_{view.name(hidden_input)}" if chain is not None else None


def _node_statements(view: GraphView, node: Value):
    name = view.name(node)
    style = []
    if node.op is None:
        if is_parameter(node):
            style.append('style=filled, fillcolor="#cfe2f3"')
        elif not node.requires_grad:
            style.append('style=filled, fillcolor="#eeeeee"')
    if node is view.root:
        style.append("peripheries=2")
    extra = (", " + ", ".join(style)) if style else ""
    statements = [f"  {name} [shape=ellipse, label={_quote(_tensor_label(view, node))}{extra}];"]
    if node.op is not None:
        statements.append(f"  op_{name} [shape=box, label={_quote(node_kind(node))}];")
        statements.append(f"  op_{name} -> {name};")
    return statements


def _pipe(dot_text: str, output_format: str) -> bytes:
    try:
        import graphviz
    except ImportError as error:
        raise GraphvizMissingError(f"drawing a graph needs graphviz: {INSTALL_HINT}") from error
    try:
        return graphviz.Source(dot_text).pipe(format=output_format)
    except graphviz.ExecutableNotFound as error:
        raise GraphvizMissingError(f"the Graphviz `dot` program was not found: {INSTALL_HINT}") from error


def render(tensor: Value, path, max_nodes: int = 200, collapse: bool = True) -> str:
    """Draw the graph of ``tensor`` to ``path``; the format follows the extension (.svg, .png, .pdf).

    Needs the optional ``graphviz`` package and the ``dot`` program (:class:`GraphvizMissingError`
    names both when missing). The file is written atomically: a failure leaves any old file.

    Returns:
        the path written.
    """
    require_graph_value(tensor, "render")
    path = os.fspath(path)
    output_format = os.path.splitext(path)[1].lstrip(".").lower()
    if output_format not in ("svg", "png", "pdf"):
        raise ValueError(f"render: cannot tell the format from {path!r}: end the path in .svg, .png or .pdf")
    image = _pipe(to_dot(tensor, max_nodes=max_nodes, collapse=collapse), output_format)
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".needle-viz-", dir=folder)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(image)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    return path


def missing_for_drawing():
    """What drawing a graph lacks here, as a sentence naming the install, or None when it can draw.

    A cheap check (an import lookup and a PATH search), made before a picture is attempted.
    """
    if importlib.util.find_spec("graphviz") is None:
        return (
            "for the picture, pip install 'needle-dl[viz]' (the graphviz package) and the Graphviz `dot` "
            "program (apt-get install graphviz, brew install graphviz or conda install graphviz)"
        )
    if shutil.which("dot") is None:
        return (
            "for the picture, install the Graphviz `dot` program (apt-get install graphviz, brew install "
            "graphviz or conda install graphviz); the graphviz Python package is already here"
        )
    return None


class GraphDrawing:
    """A graph to look at: inline SVG in Jupyter, the text of :func:`print_graph` elsewhere.

    Where graphviz or its ``dot`` program is missing, the text ends with a line saying what to
    install for the picture.
    """

    def __init__(self, tensor: Value, max_nodes: int = 200, collapse: bool = True):
        self.dot = to_dot(tensor, max_nodes=max_nodes, collapse=collapse)
        self._text = format_graph(tensor, max_nodes=min(max_nodes, 50), collapse=collapse)

    def _repr_svg_(self):
        try:
            return _pipe(self.dot, "svg").decode("utf-8")
        except GraphvizMissingError:
            return None  # Jupyter then shows the text repr

    def __repr__(self):
        missing = missing_for_drawing()
        return f"{self._text}\n({missing})" if missing else self._text


def graph(tensor: Value, max_nodes: int = 200, collapse: bool = True) -> GraphDrawing:
    """The graph of ``tensor`` for display: a Jupyter cell ending in ``ndl.viz.graph(y)`` draws it.

    Without graphviz it shows the text of :func:`print_graph`; ``.dot`` holds the DOT text.
    """
    require_graph_value(tensor, "graph")
    return GraphDrawing(tensor, max_nodes=max_nodes, collapse=collapse)
