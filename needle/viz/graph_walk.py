"""The graph as a drawing sees it: nodes in order, short names, consumers, repeated chains, sizes.

Everything here reads the graph and changes nothing: no data is computed (a lazy node without
data stays so), no counter moves.
"""
from collections import Counter
from typing import Dict, List, NamedTuple, Optional, Sequence

from ..autograd import Value, held_bytes
from ..backward import find_topo_sort

CHAIN_MIN_LENGTH = 5
"""A run of this many like nodes or more, each feeding the next, is drawn collapsed."""


def require_graph_value(value, caller: str) -> None:
    """Raise TypeError unless ``value`` is a needle Tensor (or TensorTuple): the check every
    ``ndl.viz`` entry point makes on its argument before reading any graph."""
    if isinstance(value, Value):
        return
    what = type(value).__name__
    if hasattr(value, "shape"):
        what += f" of shape {tuple(value.shape)}"
    raise TypeError(
        f"ndl.viz.{caller} needs a needle Tensor, the output of needle ops whose graph it shows; got {what}. "
        "Pass the tensor your computation returned (say loss = model(x) ... then ndl.viz."
        f"{caller}(loss)); an array becomes a Tensor with ndl.Tensor(x), a leaf with no graph above it."
    )


def node_kind(node: Value) -> str:
    """The op's class name, or ``Parameter``, ``leaf`` (needs a gradient) / ``const`` (needs none)."""
    if node.op is not None:
        return type(node.op).__name__
    if is_parameter(node):
        return "Parameter"
    return "leaf" if node.requires_grad else "const"


def is_parameter(node: Value) -> bool:
    """Whether ``node`` is an ``nn.Parameter`` (a model's learnable leaf)."""
    from ..nn.module import Parameter

    return isinstance(node, Parameter)


def node_shape(node: Value):
    """The shape of the node's data, a tuple of shapes for a TensorTuple, or None before compute."""
    data = node.cached_data
    if data is None:
        return None
    if isinstance(data, tuple):
        return tuple(item.shape for item in data)
    return tuple(data.shape)


def node_dtype(node: Value) -> str:
    data = node.cached_data
    if data is None or isinstance(data, tuple):
        return "?" if data is None else ",".join(str(item.dtype) for item in data)
    return str(data.dtype)


def node_device(node: Value) -> str:
    data = node.cached_data
    if data is None:
        return "?"
    if isinstance(data, tuple):
        return data[0].device.name if data else "?"
    return data.device.name


class Chain(NamedTuple):
    """A run of nodes of one op, each the input of the next, built the same way each time."""

    nodes: List[Value]

    @property
    def kind(self) -> str:
        return node_kind(self.nodes[0])


class GraphView(NamedTuple):
    """One look at the graph below ``root``: order, names, consumers and what collapses.

    ``order`` lists inputs before the nodes that use them; ``names`` gives ``v1, v2, …`` in that
    order; ``hidden`` holds the nodes a collapsed chain stands for (its inner rungs and whatever
    only they use); ``collapsed`` maps the chain's last hidden rung (the first one met going
    from the output down) to the chain.
    """

    root: Value
    order: List[Value]
    names: Dict[int, str]
    consumers: Dict[int, List[Value]]
    hidden: set
    collapsed: Dict[int, Chain]

    def name(self, node: Value) -> str:
        return self.names[id(node)]


def view_graph(root: Value, collapse: bool = True) -> GraphView:
    """Walk the graph below ``root`` once and decide what a drawing shows."""
    order = find_topo_sort([root])
    names = {id(node): f"v{i}" for i, node in enumerate(order, start=1)}  # v1 first, as the lecture names them
    consumers: Dict[int, List[Value]] = {id(node): [] for node in order}
    for node in order:
        for x in node.inputs:
            consumers[id(x)].append(node)
    hidden, collapsed, kept = set(), {}, {id(root)}
    if collapse:
        for chain in find_chains(order, consumers):
            hidden.update(id(node) for node in chain.nodes[2:-1])
            kept.update(id(node) for node in (chain.nodes[0], chain.nodes[1], chain.nodes[-1]))
            collapsed[id(chain.nodes[-2])] = chain
        _hide_what_only_hidden_nodes_use(order, consumers, hidden, kept)
    return GraphView(root, order, names, consumers, hidden, collapsed)


def _hide_what_only_hidden_nodes_use(order, consumers, hidden, kept):
    for node in reversed(order):
        if id(node) in kept or id(node) in hidden:
            continue
        users = consumers[id(node)]
        if users and all(id(user) in hidden for user in users):
            hidden.add(id(node))


def structure_key(node: Value, depth: int = 3):
    """What a node is made of, to ``depth`` levels: op names, shapes and dtypes, not values."""
    key = (node_kind(node), node_shape(node), node_dtype(node))
    if depth == 0 or node.op is None:
        return key
    return key + (tuple(structure_key(x, depth - 1) for x in node.inputs),)


def _rung_key(node: Value, previous: Value):
    """How ``node`` extends a chain from ``previous``: its op and the shape of its other inputs."""
    side = tuple("<chain>" if x is previous else structure_key(x) for x in node.inputs)
    return (node_kind(node), node_shape(node), side)


def find_chains(order: Sequence[Value], consumers: Dict[int, List[Value]]) -> List[Chain]:
    """Maximal runs of at least ``CHAIN_MIN_LENGTH`` like nodes, each used only by the next."""
    chains, taken = [], set()
    for node in reversed(order):  # from the output down, so a chain is found from its end
        if id(node) in taken or node.op is None:
            continue
        run = [node]
        key = None
        current = node
        while True:
            previous = _chain_predecessor(current, consumers)
            if previous is None:
                break
            rung = _rung_key(current, previous)
            if key is None:
                key = rung
            elif rung != key:
                break
            run.append(previous)
            current = previous
        if len(run) >= CHAIN_MIN_LENGTH:
            run.reverse()
            chains.append(Chain(run))
            taken.update(id(n) for n in run)
    return chains


def _chain_predecessor(node: Value, consumers) -> Optional[Value]:
    """The input that ``node`` continues: same op, used by ``node`` alone."""
    candidates = [
        x
        for x in node.inputs
        if x.op is not None and type(x.op) is type(node.op) and len(consumers[id(x)]) == 1
    ]
    return candidates[0] if len(candidates) == 1 else None


class GraphStats(NamedTuple):
    """Size of a graph: nodes by kind, bytes of its buffers, and the longest input-to-output path."""

    nodes: int
    by_kind: Dict[str, int]
    bytes: int
    depth: int


def graph_stats(tensor: Value) -> GraphStats:
    """Count the graph that produced ``tensor``.

    ``by_kind`` counts each op class, plus ``Parameter``, ``leaf`` and ``const`` for leaves; ``bytes`` are those
    of the buffers the nodes hold (arrays and ops' saved arrays), each buffer once; ``depth`` is the number of ops on the longest
    path from a leaf to ``tensor``.

    Example:
        >>> import needle as ndl
        >>> x = ndl.Tensor([1.0, 2.0])
        >>> stats = ndl.viz.graph_stats((x * x + 1).sum())
        >>> stats.nodes, stats.by_kind["EWiseMul"], stats.depth, stats.bytes
        (4, 1, 3, 28)
    """
    require_graph_value(tensor, "graph_stats")
    order = find_topo_sort([tensor])
    depth: Dict[int, int] = {}
    for node in order:
        depth[id(node)] = 0 if node.op is None else 1 + max((depth[id(x)] for x in node.inputs), default=0)
    return GraphStats(
        nodes=len(order),
        by_kind=dict(Counter(node_kind(node) for node in order)),
        bytes=held_bytes(order),
        depth=depth[id(tensor)],
    )
