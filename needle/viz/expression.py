"""A subgraph spelled as one line of nested calls: ``EWiseAdd(<earlier>, SoftmaxLoss(MatMul(…), …))``."""
from typing import Optional

from ..autograd import Value
from .graph_walk import node_kind, require_graph_value


def expression(
    node: Value,
    within: Optional[set] = None,
    outside: str = "<earlier>",
    depth: int = 3,
    max_length: int = 120,
) -> str:
    """Spell the graph below ``node`` as nested calls, ``depth`` ops deep.

    Args:
        node: where to start.
        within: ids of the op nodes that belong to the part being described (say, one
            iteration); an op node outside it is written as ``outside`` (leaves are always spelled
            by kind). ``None`` means the whole graph.
        outside: the text for inputs outside ``within``.
        depth: ops spelled out below ``node``; deeper ones are ``…``.
        max_length: the text is cut to this many characters.

    Example:
        >>> import needle as ndl
        >>> w = ndl.nn.Parameter(ndl.init.ones(3, 2))
        >>> x = ndl.Tensor([[1.0, 2.0, 3.0]], requires_grad=False)
        >>> total = ndl.Tensor([0.0])
        >>> total = total + (x @ w).sum()            # iteration 1
        >>> loss = (x @ w).sum()                     # iteration 2 ...
        >>> total = total + loss
        >>> this_iteration = {id(total), id(loss), id(loss.inputs[0])}
        >>> ndl.viz.expression(total, within=this_iteration, outside="<previous total>")
        'EWiseAdd(<previous total>, Summation(MatMul(const, Parameter)))'
        >>> ndl.viz.expression(total, depth=2)
        'EWiseAdd(EWiseAdd(leaf, …), Summation(…))'
    """
    require_graph_value(node, "expression")
    text = _spell(node, within, outside, depth)
    return text if len(text) <= max_length else text[: max_length - 1] + "…"


def _spell(node, within, outside, depth):
    if node.op is None:
        return node_kind(node)
    if within is not None and id(node) not in within:
        return outside
    if depth == 0:
        return "…"
    inner = ", ".join(_spell(x, within, outside, depth - 1) for x in node.inputs)
    return f"{node_kind(node)}({inner})"
