"""The text of the diagnostics: what happened, where, and the one-line change that cures it.

Every fix is written from what the code does (an accumulation, an addition to a container, a
state fed back into the next forward), rebuilt from the user's own line with ``ast``: never
chosen from a variable's name.

What a leak keeps alive, shown: one iteration's retained graph as a line, or drawn whole
(``retained_summary``, ``explain``). Only a reported finding pays for this: the monitor keeps no
graph nodes until a leak is found.
"""
import ast
import os
from typing import Optional

import needle
from needle import viz

from .evidence import ACCUMULATION, CARRIED_STATE, CONTAINER, Finding
from .sites import describe_site
from .source import line_of, parse_statement, statement_at


def megabytes(nbytes):
    """A byte count in the unit that reads best (B, KB, MB, GB)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes:.0f} B"


def graph_leak_message(finding, growth, iteration, live_nodes, adding=None):
    """The GraphLeakWarning text for ``finding``; ``growth`` is the detector's
    ``(nodes, bytes, every, used_by_backward)``."""
    nodes, nbytes, every, used_by_backward = growth
    used = "after backward() has used them" if used_by_backward else "that no backward() has used"
    amount = f"about {nodes:.0f} graph nodes ({megabytes(nbytes)})"
    if every < 1.5:
        rate = f"each iteration keeps {amount} more alive {used}"
    else:
        rate = f"every {every:.0f} iterations, {amount} more stay alive {used}"
    head = (
        f"graph leak: {rate} (iteration {iteration}, {live_nodes} graph nodes alive); "
        "memory will grow until the run dies."
    )
    if finding.kind in (ACCUMULATION, CARRIED_STATE):
        if finding.kind == CARRIED_STATE:
            why = (
                "This line computes a state that the next iteration feeds back into its forward pass; without "
                "detach() every past batch's graph stays reachable through it."
            )
            fix = carried_state_fix(finding)
        else:
            why = (
                "This line combines a tensor from an earlier iteration with this iteration's graph, so every "
                "past iteration's graph stays reachable through it."
            )
            fix = accumulation_fix(line_of(finding.site), finding.scalar)
        return f"{head}\n  {describe_site(finding.site)}\n  {why}{_kept(finding, nbytes)}\n  Fix: {fix}"
    if finding.kind == CONTAINER:
        where = describe_site(finding.site) if finding.site else "(the line that adds to it was not found)"
        made = f"\n  The tensors are made at {describe_site(finding.created_site)}" if finding.created_site else ""
        name = finding.container_name
        holder = f"The container `{name}`" if name else "A container"
        return (
            f"{head}\n  {where}\n  {holder} holds a tensor with its whole graph from every iteration.{made}"
            f"{_kept(finding, nbytes)}\n"
            f"  Fix: {container_fix(adding, finding.scalar, finding.holder_path)}"
        )
    return (
        f"{head}\n  The retained graphs are made at {describe_site(finding.site)}\n"
        f"  Something outside the loop keeps a reference to them.{_kept(finding, nbytes)}\n"
        "  Fix: keep `.detach()`ed tensors or Python numbers (`float(t.numpy())`) across iterations."
    )


def _kept(finding, nbytes):
    """The line that spells one iteration's retained graph (``monitor.explain()`` draws it), with
    ``nbytes``, the measured growth of live bytes it stands for."""
    summary = retained_summary(finding, nbytes)
    return f"\n  {summary} (monitor.explain() shows the chain)" if summary else ""


def no_grad_message(nodes_per_iteration, bytes_per_iteration, iterations, site):
    where = f"\n  The model is called at {describe_site(site)}" if site else ""
    return (
        f"no_grad missing: {iterations} iterations in a row ran a forward through trainable weights with grad "
        f"mode on and no backward(): each built {nodes_per_iteration:.0f} graph nodes "
        f"({megabytes(bytes_per_iteration)}) that no backward() will use.{where}\n"
        "  Fix: wrap the evaluation loop in `with needle.no_grad():` (and call model.eval()); no graph is "
        "recorded there."
    )


def wasted_graph_message(nodes, nbytes, site, trained=True):
    """The NoGradWarning text for a forward through parameters whose graph no backward() used
    (``trained``: in an iteration that also called backward(); else in an evaluation loop's)."""
    if not trained:
        where = f"\n  The model is called at {describe_site(site)}" if site else ""
        return (
            f"no_grad missing: an iteration without backward() ran a forward through the model's parameters "
            f"with grad mode on: its graph ({nodes:.0f} graph nodes, {megabytes(nbytes)}) was freed unused.{where}\n"
            "  Fix: wrap the evaluation loop in `with needle.no_grad():` (and call model.eval()), or decorate "
            "the evaluation helper with `@needle.no_grad`; no graph is recorded there."
        )
    where = describe_site(site) if site else "(the line was not found)"
    return (
        f"no_grad missing: a forward through the model's parameters ran with grad mode on, and its graph "
        f"({nodes:.0f} graph nodes, {megabytes(nbytes)}) was freed without any backward() through it: an "
        f"evaluation that records a graph for nothing.\n  {where}\n"
        "  Fix: run that call under `with needle.no_grad():` (or decorate the evaluation helper with "
        "`@needle.no_grad`); no graph is recorded there."
    )


def frozen_model_message(gradients, site):
    """The NoGradWarning text for a forward through parameters no optimizer updates, backpropagated."""
    where = describe_site(site) if site else "(the line was not found)"
    return (
        f"no_grad missing: a forward through parameters that no optimizer updates (a frozen model) ran with "
        f"grad mode on, and backward() went through its graph only to compute {gradients:.0f} gradients "
        f"of those parameters that nothing uses.\n  {where}\n"
        "  Fix: run that call under `with needle.no_grad():` (its output then needs no gradient); or, if "
        "those parameters should learn, give them to the optimizer. (`.detach()` of its output would stop "
        "the backward there, but the forward would still record a graph for nothing.)"
    )


# ---- fixes rebuilt from the user's line -------------------------------------------------------------
GENERIC_FIX = (
    "cut the link to earlier iterations: `.detach()` the tensor that crosses iterations, keep a Python "
    "number (`float(t.numpy())`), or compute it under `with needle.no_grad():`."
)


def detached(node, text):
    """``text`` (the source of ``node``) with ``.detach()`` applied to what it stores."""
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [detached(item, ast.unparse(item)) for item in node.elts]
        inner = ", ".join(items) + ("," if isinstance(node, ast.Tuple) and len(items) == 1 else "")
        return f"[{inner}]" if isinstance(node, ast.List) else f"({inner})"
    if isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
        return f"{text}.detach()"
    return f"({text}).detach()"


def as_number(node, text, scalar):
    if isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
        array = f"{text}.numpy()"
    else:
        array = f"({text}).numpy()"
    return f"float({array})" if scalar else array


def accumulation_fix(source, scalar=True):
    statement, segment = parse_statement(source)
    no_grad = "or update it under `with needle.no_grad():`."
    if isinstance(statement, ast.AugAssign):
        target, value = segment(statement.target), segment(statement.value)
        op = _operator(statement.op)
        return (
            f"accumulate a detached value: `{target} {op}= {detached(statement.value, value)}` (or a Python "
            f"number: `{target} {op}= {as_number(statement.value, value, scalar)}`), {no_grad}"
        )
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target = segment(statement.targets[0])
        value = statement.value
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add) and segment(value.left) == target:
            added = segment(value.right)
            return (
                f"accumulate a detached value: `{target} = {target} + {detached(value.right, added)}` (or a "
                f"Python number: `{target} = {target} + {as_number(value.right, added, scalar)}`), {no_grad}"
            )
        return (
            f"keep the result detached: `{target} = ({segment(value)}).detach()` (or a Python number via "
            f"`float(t.numpy())`), {no_grad}"
        )
    return GENERIC_FIX


def carried_state_fix(finding):
    per_batch = "once per batch, before it is fed to the next forward (truncated back-propagation through time)"
    holders = finding.holders
    if len(holders) > 1:
        names = ", ".join(holders)
        return f"detach the state {per_batch}: `{names} = {', '.join(f'{h}.detach()' for h in holders)}`."
    if holders:
        name = holders[0]
        line = f"{name} = tuple(s.detach() for s in {name})" if finding.state_is_tuple else f"{name} = {name}.detach()"
        return f"detach the state {per_batch}: `{line}`."
    statement, segment = parse_statement(line_of(finding.site)) if finding.site else (None, None)
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and not isinstance(statement.targets[0], ast.Tuple):
        target = segment(statement.targets[0])
        return f"detach the state {per_batch}: `{target} = {target}.detach()`."
    return f"detach the carried state {per_batch}, e.g. `h = h.detach()` (or `h = tuple(s.detach() for s in h)`)."


def within(node, path, scalar):
    """The source of ``node`` with only the part that ``path`` leads to detached (``.item()`` for a
    one-element tensor): ``(step, loss)`` with path ``[("index", 1)]`` -> ``(step, loss.item())``.
    None when the source does not spell that part (the fix then falls back to general words)."""
    tree = ast.parse(ast.unparse(node), mode="eval")

    def descend(current, steps):
        if not steps:
            return None
        kind, key = steps[0][0], steps[0][1]
        child = None
        if kind == "index" and isinstance(current, (ast.Tuple, ast.List)) and key is not None and key < len(current.elts):
            child = ("elts", key)
        elif kind == "key" and isinstance(current, ast.Dict):
            index = next((i for i, k in enumerate(current.keys) if isinstance(k, ast.Constant) and k.value == key), None)
            child = None if index is None else ("values", index)
        elif kind == "attr" and isinstance(current, ast.Call):
            keyword = next((i for i, k in enumerate(current.keywords) if k.arg == key), None)
            if keyword is not None:
                child = ("keyword", keyword)
            elif steps[0][2] is not None and steps[0][2] < len(current.args):
                child = ("args", steps[0][2])
        if child is None:
            return None
        field, index = child
        sub = current.keywords[index].value if field == "keyword" else getattr(current, field)[index]
        if len(steps) > 1:
            return descend(sub, steps[1:]) and True
        method = "item" if scalar else "detach"
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in ("item", "detach"):
            return None  # already detached: this is not the line that keeps the graph
        replacement = ast.Call(ast.Attribute(sub, method, ast.Load()), [], [])
        if field == "keyword":
            current.keywords[index].value = replacement
        else:
            getattr(current, field)[index] = replacement
        return True

    if not descend(tree.body, list(path)):
        return None
    return ast.unparse(tree.body)


def container_fix(adding, scalar, path=()):
    if adding is not None and path and len(adding.arguments) == 1 and adding.method not in ("__setitem__", "+="):
        node, _ = adding.arguments[0]
        rewritten = within(node, path, scalar)
        if rewritten is not None:
            keep = "a Python number" if scalar else "a detached tensor"
            return f"store {keep} where the tensor sits: `{adding.container_expression}.{adding.method}({rewritten})`."
    if adding is not None and path and adding.method == "__setitem__":
        node, _ = adding.arguments[0]
        rewritten = within(node, path, scalar)
        if rewritten is not None:
            return f"store a Python number where the tensor sits: `{adding.container_expression}[{adding.key}] = {rewritten}`."
    if adding is None:
        return (
            "store detached values (`t.detach()`) or Python numbers (`float(t.numpy())`) in the container, "
            "not tensors with their graph."
        )
    name, method, arguments = adding.container_expression, adding.method, adding.arguments
    if method == "__setitem__":
        node, text = arguments[0]
        return (
            f"store a detached value, e.g. `{name}[{adding.key}] = {detached(node, text)}` or "
            f"`{name}[{adding.key}] = {as_number(node, text, scalar)}`."
        )
    if method == "+=":
        node, text = arguments[0]
        return f"store detached values, e.g. `{name} += {detached(node, text)}`."
    if method in ("extend", "extendleft") and arguments:
        node, text = arguments[0]
        if isinstance(node, (ast.List, ast.Tuple)):
            return f"store detached values, e.g. `{name}.{method}({detached(node, text)})`."
        return f"store detached values, e.g. `{name}.{method}(t.detach() for t in {text})`."
    if method == "insert" and arguments:
        node, text = arguments[0]
        return f"store a detached value, e.g. `{name}.insert({adding.key}, {detached(node, text)})`."
    if len(arguments) == 1:
        node, text = arguments[0]
        return (
            f"store a detached value, e.g. `{name}.{method}({detached(node, text)})` or "
            f"`{name}.{method}({as_number(node, text, scalar)})`."
        )
    return f"store detached values (`t.detach()`) or Python numbers in `{name}`, not tensors with their graph."


_OPERATORS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
    ast.MatMult: "@", ast.LShift: "<<", ast.RShift: ">>", ast.BitOr: "|", ast.BitXor: "^", ast.BitAnd: "&",
}


def _operator(op):
    """The symbol of an augmented assignment's operator (every ``ast.operator`` has one)."""
    return _OPERATORS[type(op)]


# ---- what a leak keeps alive (monitor.explain()) ----


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
    statement = statement_at(finding.site)
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
    this_iteration = {id(node) for node in nodes}
    earlier_inputs = [x for node in nodes for x in node.inputs if x.op is not None and id(x) not in this_iteration]
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
    return f"each iteration keeps: {spelled} — {len(mine)} nodes, {megabytes(nbytes)}"



def explain(finding: Optional[Finding], path=None) -> str:
    """The retained structure of ``finding`` as text, or written as DOT/SVG/PNG to ``path``.

    A graph carried across iterations is drawn from the newest iteration back to the first, the
    repeated iterations collapsed into one line (or one dashed box); graphs held side by side in
    a container are shown once, for the newest iteration.

    Returns:
        the text (nothing is printed: ``MemoryMonitor.explain`` returns it for display), or the
        path written.
    """
    if finding is not None and not finding.retained_nodes and finding.frozen_text is not None:
        return _explain_frozen(finding, path)
    if finding is None or not finding.retained_nodes:
        return "no leak found yet: nothing to explain (MemoryMonitor.explain shows the last finding)"
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
    return "\n".join(lines)


def explain_dot(finding: Optional[Finding]) -> Optional[str]:
    """The retained graph of ``finding`` as DOT text (drawn inline in notebooks), or None."""
    if finding is None:
        return None
    if not finding.retained_nodes:
        return finding.frozen_dot
    return viz.to_dot(_roots(finding.retained_nodes)[0])


def freeze(finding: Finding) -> None:
    """Draw what ``explain()`` shows now, while the graph is alive, so that the finding can hold
    it weakly: a finding keeps text and DOT, never the tensors."""
    nodes = finding.retained_nodes
    if not nodes:
        return
    finding.frozen_text = explain(finding)
    finding.frozen_dot = viz.to_dot(_roots(nodes)[0])


def _explain_frozen(finding: Finding, path):
    """``explain()`` from what the finding drew when it was reported (its graph is gone)."""
    if path is None:
        return finding.frozen_text
    path = os.fspath(path)
    if path.endswith(".dot"):
        with open(path, "w") as stream:
            stream.write(finding.frozen_dot)
        return path
    from needle.viz.dot import _pipe

    output_format = os.path.splitext(path)[1].lstrip(".").lower()
    with open(path, "wb") as stream:
        stream.write(_pipe(finding.frozen_dot, output_format))
    return path
