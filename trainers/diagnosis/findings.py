"""Reading the locator's evidence into a Finding: what holds the retained graph, and which user line.

Pure questions asked by the states of ``trainers.diagnosis.machine``; nothing here changes a state.
"""
import collections
import math
import weakref

from .adding_line import find_adding_line, name_held_in_frames
from .evidence import ACCUMULATION, CARRIED_STATE, CONTAINER, HELD, MISSING_NO_GRAD, Finding
from .locator import fed_forward
from .sites import is_framework_file
from .source import assigned_names, assigned_targets


class ForwardVerdict:
    """What one iteration without backward() shows: ``finding`` (an evaluation without no_grad),
    ``losses`` kept (micro-batch losses for a later backward(), or an evaluation's kept results),
    ``chain`` (a graph summed across iterations that reads no weight), or nothing at all."""

    def __init__(self, finding=None, losses=(), chain=False):
        self.finding, self.losses, self.chain = finding, losses, chain


def untrained_forward(locator, record, frames):
    """The ForwardVerdict of the iteration ``record`` ends (a training step, a summed micro-batch or a
    forward through no weight give an empty verdict)."""
    if record.backward_calls > 0:
        return ForwardVerdict()
    origins = locator.origins_of(record.iteration)
    readers = [o for o in origins if o.reads_weight]
    chained = [o for o in origins if o.reads_earlier_graph]
    if not readers:
        # no trained weights: the lecture's `sum_loss = (sum_loss + x * x).detach()` keeps nothing; its
        # trap `sum_loss = sum_loss + x * x` keeps the sum, chained to every earlier iteration
        return ForwardVerdict(chain=any(o.ref() is not None for o in chained))
    if chained and not any(o.reads_weight for o in chained):
        return ForwardVerdict()  # summed onto an earlier graph: a backward() will come (gradient accumulation)
    sites = collections.Counter(_loop_site(o, frames) for o in readers)
    sites.pop(None, None)
    site = min(sites, key=lambda s: (-sites[s], s[1])) if sites else None
    finding = Finding(MISSING_NO_GRAD, site, iteration=record.iteration)
    finding.nodes_made = len(origins)
    finding.bytes_made = sum(o.nbytes for o in origins)
    kept = [node for node in (o.ref() for o in origins) if node is not None]
    finding.kept_alive = bool(kept)
    # NOTE: one-element results kept without backward() may be micro-batch losses gathered for one
    # later backward() (gradient accumulation); the AwaitingBackward state tells.
    losses = [weakref.ref(node) for node in kept if node.requires_grad and is_scalar(node)]
    return ForwardVerdict(finding, losses=losses)


class GrowthEvidence:
    """A growth finding with what its report needs: the adding line and the container, where one holds it."""

    def __init__(self, finding=None, adding=None, container=None):
        self.finding, self.adding, self.container = finding, adding, container


def growth(locator, iteration, frames):
    """The GrowthEvidence of the nodes that outlived a whole iteration (its finding is None when none did)."""
    if not locator.any_retained(iteration):
        return GrowthEvidence()  # nothing outlived its iteration: no collection needed to know
    alive = locator.alive()
    retained = locator.retained(alive, iteration)
    if not retained:
        return GrowthEvidence()
    newest = max(o.iteration for _, o in retained)
    kept = tuple(node for node, o in alive if o.iteration == newest)
    crossings = locator.crossings(alive, iteration)
    if crossings:
        return GrowthEvidence(_carried(crossings, alive, frames, kept, newest))
    used = {id(x) for node, _ in alive for x in node.inputs}
    roots = [node for node, o in retained if o.iteration == newest and id(node) not in used]
    container, held, path = locator.containers_holding(roots, own=[alive, retained, roots])
    scalar = is_scalar(held if held is not None else (roots or kept)[0])
    origin_of = {id(node): o for node, o in retained}
    if container is not None:
        created = origin_of[id(held)].site
        adding = find_adding_line(container, frames[0] if frames else None)
        name = adding.container_expression if adding else name_held_in_frames(container, frames[0] if frames else None)
        finding = Finding(
            CONTAINER,
            adding.site if adding else None,
            created_site=created,
            container_name=name,
            scalar=scalar,
            retained_nodes=kept,
            iteration=newest,
        )
        finding.holder_path = path
        return GrowthEvidence(finding, adding, container)
    site = origin_of[id(roots[0])].site if roots else retained[0][1].site
    return GrowthEvidence(Finding(HELD, site, created_site=site, scalar=scalar, retained_nodes=kept, iteration=newest))


def _carried(crossings, alive, frames, kept, newest):
    """An accumulation or a carried state, from the nodes that read an earlier iteration's."""

    def site_of(consumer_origin, earlier):
        return earlier.site if earlier is not None else consumer_origin.site

    by_site = collections.Counter(site_of(o, earlier) for _, o, _, earlier in crossings)
    by_site.pop(None, None)
    if not by_site:
        return None
    site = min(by_site, key=lambda s: (-by_site[s], s[1]))
    chosen = next(earlier if earlier is not None else o for _, o, _, earlier in crossings if site_of(o, earlier) == site)
    state = any(fed_forward(consumer) for consumer, _, _, _ in crossings)
    carried_sites = {site_of(o, earlier) for _, o, _, earlier in crossings}
    latest = max(o.iteration for _, o in alive)
    current = [node for node, o in alive if o.iteration == latest and o.site in carried_sites]
    # NOTE: a line can make several values (``output, h = rnn(x, h)``); the state is the one
    # in the role of what crossed: same op, same tuple position, same shape.
    carried_roles = {_role(x) for _, _, x, _ in crossings}
    current = [node for node in current if _role(node) in carried_roles] or current
    holders, is_tuple, frame = (
        _holders(current, frames, lambda f: chosen.site_in(f.f_code)) if state else ((), False, None)
    )
    if holders and chosen.site_in(frame.f_code) is not None:
        site = chosen.site_in(frame.f_code)
    elif state:
        # NOTE: a state kept on an object (``self.h = self.cell(x, self.h)``) is named by the
        # innermost line that assigns it, not by the cell's ``return`` line.
        site = next((entry[1:] for entry in chosen.stack if assigned_targets(entry[1:])), site)
    return Finding(
        CARRIED_STATE if state else ACCUMULATION,
        site,
        holders=holders,
        state_is_tuple=is_tuple,
        scalar=is_scalar(current[0]) if current else True,
        retained_nodes=kept,
        iteration=newest,
    )


def _role(node):
    """What a node is, apart from its values: op class, tuple position, shape."""
    data = node.cached_data
    shape = getattr(data, "shape", None)
    return type(node.op), getattr(node.op, "index", None), shape


def user_frames(frame, depth=12):
    """The user frames from ``frame`` outward (the loop that steps the monitor, and its callers)."""
    frames = []
    while frame is not None and len(frames) < depth:
        if not is_framework_file(frame.f_code.co_filename):
            frames.append(frame)
        frame = frame.f_back
    return frames


def _loop_site(origin, frames):
    """The node's line in the innermost stepping frame that was on the stack when it was made."""
    for frame in frames:
        site = origin.site_in(frame.f_code)
        if site is not None:
            return site
    return origin.site


def _holders(current, frames, origin_site_in=None):
    """The local names bound to the carried state in the innermost frame that holds it, whether it is a
    tuple of tensors, and that frame."""
    ids = {id(node) for node in current}
    for frame in frames:
        names, tuples = [], []
        for name, value in list(frame.f_locals.items()):
            if id(value) in ids:
                names.append(name)
            elif isinstance(value, (tuple, list)) and any(id(item) in ids for item in value):
                tuples.append(name)
        site = origin_site_in(frame) if origin_site_in else None
        assigned = assigned_names(site) if site is not None else set()
        if tuples:
            chosen = [n for n in tuples if n in assigned] or tuples
            return (chosen[0],), True, frame
        if names:
            chosen = [n for n in names if n in assigned] or names[:1]
            return tuple(chosen), False, frame
    return (), False, None


def is_scalar(node):
    try:
        return math.prod(node.shape) == 1
    except Exception:  # noqa: BLE001  (a lazy node without data: advise in general words)
        return False
