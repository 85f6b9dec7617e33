"""What a leak keeps alive, shown: one iteration's retained graph as a line, or drawn whole.

Only a reported finding pays for this: the monitor keeps no graph nodes until a leak is found.
"""
import ast
import os
from typing import Optional

import needle
from needle import viz

from .evidence import CONTAINER, Finding
from .sites import describe_site, source_of


def _megabytes(nbytes):
    from .messages import megabytes

    return megabytes(nbytes)


def _roots(nodes):
    """The retained nodes no other retained node reads: the tops of one iteration's graph."""
    read = {id(x) for node in nodes for x in node.inputs}
    return [node for node in nodes if id(node) not in read]


def _carried_name(finding: Finding) -> Optional[str]:
    """The name that carries the graph into the next iteration (``total_loss``, ``h``), if one does."""
    if finding.holders:
        return finding.holders[0]
    if finding.site is None:
        return None
    try:
        statement = ast.parse(source_of(finding.site).strip()).body[0]
    except (SyntaxError, IndexError, ValueError):
        return None
    if isinstance(statement, ast.AugAssign):
        return ast.unparse(statement.target)
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        return ast.unparse(statement.targets[0])
    return None


def _iteration_graph(finding: Finding):
    """The tops of one iteration's retained graph, its graph nodes and its constants (not
    those of earlier iterations that it reads)."""
    nodes = finding.retained_nodes
    roots = _roots(nodes)
    recorded = {id(node) for node in nodes}
    earlier_inputs = [x for node in nodes for x in node.inputs if x.op is not None and id(x) not in recorded]
    earlier = {id(node) for node in needle.autograd.find_topo_sort(earlier_inputs)} if earlier_inputs else set()
    reached = [node for node in needle.autograd.find_topo_sort(roots) if id(node) not in earlier]
    mine = [node for node in reached if node.op is not None]
    # this iteration's constants (its data batch) are kept too, with the gradients backward() gave them
    constants = [node for node in reached if node.op is None and not node.requires_grad]
    return roots, mine, constants


def retained_summary(finding: Finding, nbytes: Optional[float] = None) -> Optional[str]:
    """One line spelling one iteration's retained graph, with its size, or None without nodes.

    E.g. ``each iteration keeps: EWiseAdd(<previous total_loss>, SoftmaxCrossEntropy(…)) — 5 nodes, 35 KB``:
    the graph nodes one iteration made that stay alive, and ``nbytes``. The warning passes the
    measured growth of live bytes per kept iteration, so that both of its figures are the memory's
    growth (for a carried graph that includes the larger gradient graphs each backward through
    it builds); without it, the bytes of the buffers that only this graph and its gradients
    hold, each once.
    """
    if not finding.retained_nodes:
        return None
    roots, mine, constants = _iteration_graph(finding)
    within = {id(node) for node in mine}
    name = _carried_name(finding) if finding.kind != CONTAINER else None
    outside = f"<previous {name}>" if name else "<earlier iteration>"
    spelled = "; ".join(viz.expression(root, within=within, outside=outside, depth=3) for root in roots[:2])
    if len(roots) > 2:
        spelled += f"; and {len(roots) - 2} more"
    # NOTE: each buffer once, and only those nothing outside this iteration's graph holds (the
    # data set a batch is a view of is not kept by the graph). A batch the loop keeps itself
    # (a list of batches made up front) is counted here although the graph does not keep it.
    if nbytes is None:
        gradients = [node.grad for node in mine + constants if node.grad is not None]
        nbytes = needle.autograd.held_bytes(mine + constants + gradients, exclusive=True)
    return f"each iteration keeps: {spelled} — {len(mine)} nodes, {_megabytes(nbytes)}"


def explain(finding: Optional[Finding], path=None) -> str:
    """Show the retained structure of ``finding``: print it, or write DOT/SVG/PNG to ``path``.

    A graph carried across iterations is drawn from the newest iteration back to the first, the
    repeated iterations collapsed into one line (or one dashed box); graphs held side by side in
    a container are shown once, for the newest iteration.

    Returns:
        the text shown (printed when ``path`` is None), or the path written.
    """
    if finding is None or not finding.retained_nodes:
        text = "no leak found yet: nothing to explain (MemoryMonitor.explain shows the last finding)"
        if path is None:
            print(text)
        return text
    roots = _roots(finding.retained_nodes)
    root = roots[0]
    if path is not None:
        path = os.fspath(path)
        if path.endswith(".dot"):
            with open(path, "w") as stream:
                stream.write(viz.to_dot(root))
            return path
        return viz.render(root, path)
    where = describe_site(finding.site or finding.created_site) if (finding.site or finding.created_site) else "?"
    lines = [f"leak ({finding.kind.replace('_', ' ')}) at {where}", retained_summary(finding)]
    lines.append(viz.format_graph(root, values=False))
    if finding.kind == CONTAINER:
        holder = f"`{finding.container_name}`" if finding.container_name else "the container"
        lines.append(f"  … and a graph like this one for every earlier iteration, held by {holder}")
    text = "\n".join(lines)
    print(text)
    return text
