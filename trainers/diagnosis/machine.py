"""Leak diagnosis: the one state machine, from cheap watching to a reported finding.

::

    watching ──suspicion──▶ suspecting ──not in a quiet while──▶ locating ──finding──▶ reporting
       ▲                        │ (quiet: ignored)                    │ (nothing by the deadline)     │
       └────────────────────────┴─────────────────────────────────────┴───────────────────────────────┘

- **watching**: every step, the detector reads the O(1) counters (``trainers.diagnosis.detector``).
- **suspecting**: a suspicion arrived; it is acted on unless a recent false alarm asks for a
  quiet while. Locating then lasts long enough to see the growth recur at its cadence.
- **locating**: the locator records every new node with its iteration and user lines
  (``trainers.diagnosis.locator``) until the evidence answers: a finding, or nothing by the deadline (a
  false alarm: back to watching, checking less often for a while).
- **reporting**: the finding's warning is written and issued; the finding is kept as
  ``last_finding`` with the nodes of one iteration's retained graph. A container whose adding
  line was not on the stack waits here (about one cadence) while that line is caught as it runs.

The detector and the locator hold evidence only; every decision is made here.
"""
import ast
import collections
import math
import weakref
from typing import Callable, Optional

from needle import autograd

from .adding_line import AddingLineWatcher, find_adding_line, name_held_in_frames
from .detector import LeakDetector
from .evidence import (
    ACCUMULATION,
    CARRIED_STATE,
    CONTAINER,
    HELD,
    MISSING_NO_GRAD,
    UNTRAINED_FORWARD,
    UNUSED_GROWTH,
    Finding,
    Suspicion,
)
from .locator import LeakLocator, fed_forward
from .report import freeze, graph_leak_message, no_grad_message
from .wasted import WastedGraphs
from .sites import is_framework_file, source_of
from .warnings import GraphLeakWarning, NoGradWarning

WATCHING, SUSPECTING, LOCATING, REPORTING = "watching", "suspecting", "locating", "reporting"
SLOWEST_CADENCE = 8  # iterations between additions to a leak that the locator waits to see


class LeakDiagnosis:
    """Owns the diagnosis state; ``observe`` advances it by one monitored step.

    Args:
        emit: ``emit(message, category, key, site)`` issues a warning (the monitor's warn mode).
    """

    def __init__(self, emit: Callable):
        self.emit = emit
        self.state = WATCHING
        self.detector = LeakDetector()
        self.locator = LeakLocator()
        self.suspicion: Optional[Suspicion] = None
        self.last_finding: Optional[Finding] = None
        self._deadline = 0
        self._quiet_until = -1  # growth suspicions are not acted on before this iteration
        self._false_alarms = 0
        self._reports = 0
        self._forward_runs_to_skip = 0  # untrained-forward runs left unchecked (after dismissals)
        self._forward_dismissals = 0
        self.wasted = WastedGraphs()  # forwards through parameters freed with no backward() through them
        self._dismissed_signature = None  # how the last dismissed run's first iteration looked
        self._adding = None  # the line adding to a container, for the finding being located
        self._watcher = AddingLineWatcher()  # catches that line as it runs, when it was not found
        self._pending = None  # a container finding waiting for its adding line (reporting)
        self._container = None  # the container of the finding being located or reported
        self._awaiting_backward = None  # [finding, weak refs to kept losses, the losses held] until a backward()
        self._no_grad_reported = (None, -1)  # (site, iteration) of the latest NoGradWarning, from either path

    # ---- the state machine ----------------------------------------------------------------
    def observe(self, record, caller_frame, wasted=(0, 0)) -> None:
        """Advance by one step: ``record`` is the step's counters, ``caller_frame`` the frame that stepped,
        ``wasted`` the step's ``trainers.diagnosis.wasted.WastedCounts`` (wasted, frozen and small graphs)."""
        # NOTE: in any iteration, training or not; an evaluation the untrained-forward path also
        # reports is warned once (``_no_grad_just_reported``, and the same finding key).
        site = self.wasted.observe(record.iteration, wasted, caller_frame)
        if site is not None:
            finding = Finding(MISSING_NO_GRAD, site, iteration=record.iteration)
            if not self._no_grad_just_reported(site, record.iteration):
                self.emit(self.wasted.message(site), NoGradWarning, finding.key, site)
        suspicion = self.detector.observe(record)
        if self.state == REPORTING:
            self._awaiting_adding_line(record)
        elif self.state == LOCATING:
            self._locating(record, _user_frames(caller_frame))
        elif suspicion is not None:
            self._suspecting(suspicion, record)

    def _suspecting(self, suspicion, record):
        if suspicion.kind == UNTRAINED_FORWARD:
            if self._forward_runs_to_skip > 0 and suspicion.signature == self._dismissed_signature:
                self._forward_runs_to_skip -= 1
                return
        elif record.iteration < self._quiet_until:
            return
        self.state = SUSPECTING
        self.suspicion = suspicion
        if suspicion.kind == UNTRAINED_FORWARD:
            self._deadline = record.iteration + 1  # one iteration tells
        else:
            # NOTE: growth can be garbage in reference cycles; the locator collects before it
            # looks, so such a suspicion ends as a false alarm, not as a report.
            # NOTE: one growth can show as two steps of growth (the local that held the graph lets go
            # one iteration later), so the measured cadence may be too short: look for at least as
            # long as the slowest cadence the detector is meant to catch.
            self._deadline = record.iteration + 2 + max(min(suspicion.every, 16), SLOWEST_CADENCE)
        self.state = LOCATING
        self.locator.start(record.iteration + 1)

    def _locating(self, record, frames):
        iteration = record.iteration
        if self.suspicion.kind == UNTRAINED_FORWARD:
            if self._awaiting_backward is None:
                finding = self._untrained_forward_finding(record, frames)
            else:
                finding = self._verdict_after_backward(record)
        else:
            finding = self._growth_finding(iteration, frames)
        if finding is not None and finding.kind == CONTAINER and self._adding is None:
            self.locator.stop()
            if self._watcher.start(self._container, caller_frame_of(frames)):
                self.state, self._pending = REPORTING, finding
                self._deadline = iteration + 1 + min(max(round(self.detector.growth()[2]), 1), 16)
                return
        if finding is not None:
            self._reporting(finding, record)
        elif iteration >= self._deadline:
            self._false_alarm(iteration)
        else:
            self.locator.advance(iteration + 1)

    def _awaiting_adding_line(self, record):
        """Reporting a container finding: wait (an iteration or a cadence) for the line that adds to it."""
        caught = self._watcher.caught
        if caught is None and record.iteration < self._deadline:
            return
        self._watcher.stop()
        finding, self._pending, self._container = self._pending, None, None
        if caught is not None:
            finding.site = caught.site
            if caught.container_expression is not None:
                finding.container_name = caught.container_expression
                self._adding = caught
        self._reporting(finding, record)

    def _reporting(self, finding, record):
        self.state = REPORTING
        suspicion = self.suspicion
        self.locator.stop()
        self.last_finding = finding
        if finding.kind == MISSING_NO_GRAD:
            self._forward_dismissals = 0
            message = no_grad_message(finding.nodes_made, finding.bytes_made, self.detector.unsettled_run, finding.site)
            self._back_to_watching()
            if not self._no_grad_just_reported(finding.site, record.iteration):
                self.emit(message, NoGradWarning, finding.key, finding.site)
            return
        self._reports += 1
        growth = self.detector.growth()
        if suspicion.kind == UNUSED_GROWTH:
            growth = (suspicion.nodes, suspicion.nbytes, 1, False)
        self.detector.forget()
        self._quiet_until = record.iteration + 10 * 2 ** min(self._reports, 6)
        message = graph_leak_message(finding, growth, record.iteration, record.live_nodes, self._adding)
        freeze(finding)  # the finding keeps text and DOT; its nodes only weakly
        self._container = None  # nor the user's container
        self._back_to_watching()
        self.emit(message, GraphLeakWarning, finding.key, finding.site or finding.created_site)

    def _no_grad_just_reported(self, site, iteration, within=2):
        """Whether the other path (evaluation-only iterations, wasted graphs) just reported this site;
        notes this report either way, so that one evaluation gives one NoGradWarning."""
        last_site, last_iteration = self._no_grad_reported
        self._no_grad_reported = (site, iteration)
        return site == last_site and iteration - last_iteration <= within

    def _false_alarm(self, iteration):
        self.locator.stop()
        if self.suspicion.kind == UNTRAINED_FORWARD:
            if self.suspicion.signature != self._dismissed_signature:
                self._dismissed_signature, self._forward_dismissals = self.suspicion.signature, 0
            self._forward_dismissals += 1
            # NOTE: only runs that start like the dismissed one (as many nodes made and kept) are
            # skipped, so that a validation burst in a loop that sums micro-batches is still checked.
            self._forward_runs_to_skip = min(2 ** self._forward_dismissals - 1, 15)
        else:
            self._false_alarms += 1
            self.detector.forget()
            self._quiet_until = iteration + 4 * 2 ** min(self._false_alarms, 4)
        self._back_to_watching()

    def _back_to_watching(self):
        self.state = WATCHING
        self._awaiting_backward = None
        self.suspicion = None

    def close(self):
        """Stop any search in progress (restores needle's unobserved fast path)."""
        self.locator.stop()
        self.wasted.stop()
        self._watcher.stop()
        self._pending = self._container = None
        self._back_to_watching()

    # ---- reading the evidence -------------------------------------------------------------
    def _untrained_forward_finding(self, record, frames):
        """An evaluation without no_grad, or None (a training step, a summed micro-batch, no weights)."""
        if record.backward_calls > 0:
            return None
        records = self.locator.records_of(record.iteration)
        readers = [r for r in records if r.reads_weight]
        if not readers:
            return None  # no trained weights: e.g. the lecture's `sum_loss = (sum_loss + x * x).detach()`
        chained = [r for r in records if r.reads_earlier_graph]
        if chained and not any(r.reads_weight for r in chained):
            return None  # summed onto an earlier graph: a backward() will come (gradient accumulation)
        sites = collections.Counter(_loop_site(r, frames) for r in readers)
        sites.pop(None, None)
        site = min(sites, key=lambda s: (-sites[s], s[1])) if sites else None
        finding = Finding(MISSING_NO_GRAD, site, iteration=record.iteration)
        finding.nodes_made = len(records)
        finding.bytes_made = sum(r.nbytes for r in records)
        kept = [node for node in (r.ref() for r in records) if node is not None]
        finding.kept_alive = bool(kept)
        losses = [node for node in kept if node.requires_grad and _is_scalar(node)]
        if losses:
            # NOTE: one-element results kept without backward() may be micro-batch losses gathered
            # for one later backward() (gradient accumulation). If they are gone an iteration later
            # they were dropped (an evaluation); if they stay, the verdict waits for the backward()
            # that uses them, or for 16 iterations without one.
            self._awaiting_backward = [finding, [weakref.ref(node) for node in losses], None]
            self._deadline = record.iteration + 16
            self.locator.stop()  # the verdict needs only these losses
            return None
        return finding

    def _verdict_after_backward(self, record):
        waiting = self._awaiting_backward
        finding, weak, held = waiting
        if held is None:
            held = waiting[2] = [node for node in (ref() for ref in weak) if node is not None]
            if not held:
                return finding  # dropped again: an evaluation without no_grad
        if record.backward_calls > 0:
            if all(autograd.is_spent(node) for node in held):
                self._deadline = record.iteration  # the backward() used them: gradient accumulation
                return None
            return finding
        return finding if record.iteration >= self._deadline else None

    def _growth_finding(self, iteration, frames):
        locator = self.locator
        if not locator.any_retained(iteration):
            return None  # nothing outlived its iteration: no collection needed to know
        alive = locator.alive()
        retained = locator.retained(alive, iteration)
        if not retained:
            return None
        self._adding = None
        newest = max(r.iteration for _, r in retained)
        kept = tuple(node for node, r in alive if r.iteration == newest)
        crossings = locator.crossings(alive, iteration)
        if crossings:
            return self._carried_finding(crossings, alive, frames, kept, newest)
        used = {id(x) for node, _ in alive for x in node.inputs}
        roots = [node for node, r in retained if r.iteration == newest and id(node) not in used]
        container, held, path = locator.containers_holding(roots, own=[alive, retained, roots])
        scalar = _is_scalar(held if held is not None else (roots or kept)[0])
        record_of = {id(node): r for node, r in retained}
        if container is not None:
            created = record_of[id(held)].site
            adding = find_adding_line(container, frames[0] if frames else None)
            self._adding, self._container = adding, container
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
            return finding
        site = record_of[id(roots[0])].site if roots else retained[0][1].site
        return Finding(HELD, site, created_site=site, scalar=scalar, retained_nodes=kept, iteration=newest)

    def _carried_finding(self, crossings, alive, frames, kept, newest):
        def site_of(consumer_record, earlier):
            return earlier.site if earlier is not None else consumer_record.site

        by_site = collections.Counter(site_of(r, earlier) for _, r, _, earlier in crossings)
        by_site.pop(None, None)
        if not by_site:
            return None
        site = min(by_site, key=lambda s: (-by_site[s], s[1]))
        chosen = next(
            earlier if earlier is not None else r for _, r, _, earlier in crossings if site_of(r, earlier) == site
        )
        state = any(fed_forward(consumer) for consumer, _, _, _ in crossings)
        carried_sites = {site_of(r, earlier) for _, r, _, earlier in crossings}
        latest = max(r.iteration for _, r in alive)
        current = [node for node, r in alive if r.iteration == latest and r.site in carried_sites]
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
            site = next((entry[1:] for entry in chosen.stack if _assigned_targets(entry[1:])), site)
        return Finding(
            CARRIED_STATE if state else ACCUMULATION,
            site,
            holders=holders,
            state_is_tuple=is_tuple,
            scalar=_is_scalar(current[0]) if current else True,
            retained_nodes=kept,
            iteration=newest,
        )


def _role(node):
    """What a node is, apart from its values: op class, tuple position, shape."""
    data = node.cached_data
    shape = getattr(data, "shape", None)
    return type(node.op), getattr(node.op, "index", None), shape


def _user_frames(frame, depth=12):
    """The user frames from ``frame`` outward (the loop that steps the monitor, and its callers)."""
    frames = []
    while frame is not None and len(frames) < depth:
        if not is_framework_file(frame.f_code.co_filename):
            frames.append(frame)
        frame = frame.f_back
    return frames


def caller_frame_of(frames):
    return frames[0] if frames else None


def _loop_site(record, frames):
    """The node's line in the innermost stepping frame that was on the stack when it was made."""
    for frame in frames:
        site = record.site_in(frame.f_code)
        if site is not None:
            return site
    return record.site


def _assigned_targets(site):
    """The source of a line's assignment targets (``["self.h"]``), or [] for other statements."""
    try:
        statement = ast.parse(source_of(site).strip()).body[0]
    except (SyntaxError, IndexError):
        return []
    return [ast.unparse(t) for t in statement.targets] if isinstance(statement, ast.Assign) else []


def _assigned_names(site):
    """The plain names a line's assignment binds (``h`` in ``h = cell(x, h)``, ``h, c`` in ``h, c = ...``)."""
    if site is None:
        return set()
    try:
        statement = ast.parse(source_of(site).strip()).body[0]
    except (SyntaxError, IndexError):
        return set()
    targets = statement.targets if isinstance(statement, ast.Assign) else []
    names = set()
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                names.add(node.id)
    return names


def _holders(current, frames, record_site_in=None):
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
        assigned = _assigned_names(record_site_in(frame)) if record_site_in else set()
        if tuples:
            chosen = [n for n in tuples if n in assigned] or tuples
            return (chosen[0],), True, frame
        if names:
            chosen = [n for n in names if n in assigned] or names[:1]
            return tuple(chosen), False, frame
    return (), False, None


def _is_scalar(node):
    try:
        return math.prod(node.shape) == 1
    except Exception:  # noqa: BLE001  (a lazy node without data: advise in general words)
        return False
