"""The text of leak warnings: what happened, where, and the one-line change that cures it."""
import re

from .sites import describe_site, source_of


def megabytes(nbytes):
    """A byte count in the unit that reads best (B, KB, MB, GB)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes:.0f} B"


def _growth(nodes, nbytes):
    return f"about {nodes:.0f} graph nodes ({megabytes(nbytes)})"


def graph_leak_message(finding, nodes_per_iteration, bytes_per_iteration, iteration, live_nodes, unused=False):
    """The GraphLeakWarning text; ``unused`` when no backward() ran (a graph built and kept)."""
    after = "without any backward() using them" if unused else "after backward() has used them"
    head = (
        f"graph leak: each iteration keeps {_growth(nodes_per_iteration, bytes_per_iteration)} more "
        f"alive {after} (iteration {iteration}, {live_nodes} graph nodes alive); "
        "memory will grow until the run dies."
    )
    if finding.kind == "carried":
        source = source_of(finding.site)
        return (
            f"{head}\n  {describe_site(finding.site)}\n"
            "  This line combines a tensor from an earlier iteration with this iteration's graph, so every "
            "past iteration's graph stays reachable through it.\n"
            f"  Fix: {_carried_fix(source)}"
        )
    if finding.kind == "container":
        where = describe_site(finding.site) if finding.site else "(the adding line was not caught)"
        stored = _stored_expression(source_of(finding.site)) if finding.site else "loss"
        as_number = f"float({stored}.numpy())" if "loss" in stored else f"{stored}.numpy()"
        made = f"\n  The tensors are made at {describe_site(finding.created_site)}" if finding.created_site else ""
        return (
            f"{head}\n  {where}\n  The container `{finding.container_name}` holds a tensor with its whole graph "
            f"from every iteration.{made}\n"
            f"  Fix: store a detached value, e.g. `{finding.container_name}.append({stored}.detach())` or "
            f"`{finding.container_name}.append({as_number})`."
        )
    return (
        f"{head}\n  The retained graphs are made at {describe_site(finding.site)}\n"
        "  Something outside the loop keeps a reference to them.\n"
        "  Fix: keep `.detach()`ed tensors or Python numbers (`float(t.numpy())`) across iterations."
    )


def _stored_expression(source):
    """The tensor a line such as ``losses.append(loss)`` stores (``loss`` when unclear)."""
    match = re.search(r"\.(?:append|add|appendleft|insert)\((.+)\)\s*(?:#.*)?$", source)
    value = match.group(1).strip() if match else ""
    return value if value.isidentifier() else "loss"


def _carried_fix(source):
    source = source.split("#")[0].strip()
    augmented = "+=" in source
    target, _, value = source.partition("+=" if augmented else "=")
    target, value = target.strip(), value.strip()
    if not target or not value or not (augmented or target in value):
        return (
            "cut the link to earlier iterations: `.detach()` the tensor that crosses iterations, keep a Python "
            "number (`float(t.numpy())`), or compute it under `with needle.no_grad():`."
        )
    if "hidden" in target or target.lower().startswith(("h", "state", "c")):
        return (
            f"detach the carried state once per iteration: `{target} = {target}.detach()` before it is "
            "used again (truncated back-propagation through time)."
        )
    if not augmented and value.startswith(target + " + ") and value[len(target) + 3:].isidentifier():
        augmented, value = True, value[len(target) + 3:]
        return (
            f"accumulate a detached value: `{target} = {target} + {value}.detach()` (or a Python number: "
            f"`{target} = {target} + float({value}.numpy())`), or update it under `with needle.no_grad():`."
        )
    if augmented:
        detached = f"{value}.detach()" if value.isidentifier() else f"({value}).detach()"
        return (
            f"accumulate a detached value: `{target} += {detached}` (or a Python number: "
            f"`{target} += float({value}.numpy())`), or update it under `with needle.no_grad():`."
        )
    return (
        f"keep the result detached: `{target} = ({value}).detach()` (or a Python number via "
        "`float(loss.numpy())`), or update it under `with needle.no_grad():`."
    )


def no_grad_message(nodes_per_iteration, bytes_per_iteration, iterations, site):
    where = f"\n  Nodes are made at {describe_site(site)}" if site else ""
    return (
        f"no_grad missing: the last {iterations} iterations each built {nodes_per_iteration:.0f} graph nodes "
        f"({megabytes(bytes_per_iteration)}) that no backward() used.{where}\n"
        "  Fix: wrap evaluation in `with needle.no_grad():` (and call model.eval()); nothing is recorded there."
    )
