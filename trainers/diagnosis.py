"""Leak diagnosis: the one state machine, from cheap watching to a reported finding.

::

    watching ──suspicion──▶ suspecting ──not in a quiet while──▶ locating ──finding──▶ reporting
       ▲                        │ (quiet: ignored)                    │ (nothing by the deadline)     │
       └────────────────────────┴─────────────────────────────────────┴───────────────────────────────┘

- **watching**: every step, the detector reads the O(1) counters (``trainers.detector``).
- **suspecting**: a suspicion arrived; it is acted on unless a recent false alarm asks for a
  quiet while. Locating then lasts long enough to see the growth recur at its cadence.
- **locating**: the locator records every new node with its iteration and user lines
  (``trainers.locator``) until the evidence answers: a finding, or nothing by the deadline (a
  false alarm: back to watching, checking less often for a while).
- **reporting**: the finding's warning is written and issued; the finding is kept as
  ``last_finding`` with the nodes of one iteration's retained graph.

The detector and the locator hold evidence only; every decision is made here.
"""
import collections
import math
from typing import Callable, Optional

from .adding_line import find_adding_line, name_held_in_frames
from .detector import LeakDetector
from .evidence import (
    ACCUMULATION,
    CARRIED_STATE,
    CONTAINER,
    GROWTH,
    HELD,
    MISSING_NO_GRAD,
    UNTRAINED_FORWARD,
    UNUSED_GROWTH,
    Finding,
    Suspicion,
)
from .locator import LeakLocator, fed_forward
from .messages import graph_leak_message, no_grad_message
from .sites import user_frame_of
from .warning_categories import GraphLeakWarning, NoGradWarning

WATCHING, SUSPECTING, LOCATING, REPORTING = "watching", "suspecting", "locating", "reporting"


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
        self._adding = None  # the line adding to a container, for the finding being located

    # ---- the state machine ----------------------------------------------------------------
    def observe(self, record, caller_frame) -> None:
        """Advance by one step: ``record`` is the step's counters, ``caller_frame`` the frame that stepped."""
        suspicion = self.detector.observe(record)
        if self.state == LOCATING:
            self._locating(record, user_frame_of(caller_frame))
        elif suspicion is not None:
            self._suspecting(suspicion, record, user_frame_of(caller_frame))

    def _suspecting(self, suspicion, record, loop_frame):
        if suspicion.kind == UNTRAINED_FORWARD:
            if self._forward_runs_to_skip > 0:
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
            self._deadline = record.iteration + 1 + min(suspicion.every, 16) + 1
        self.state = LOCATING
        self.locator.start(record.iteration + 1, loop_frame.f_code if loop_frame is not None else None)

    def _locating(self, record, loop_frame):
        iteration = record.iteration
        if self.suspicion.kind == UNTRAINED_FORWARD:
            finding = self._untrained_forward_finding(record)
        else:
            finding = self._growth_finding(iteration, loop_frame)
        if finding is not None:
            self._reporting(finding, record)
        elif iteration >= self._deadline:
            self._false_alarm(iteration)
        else:
            self.locator.advance(iteration + 1)

    def _reporting(self, finding, record):
        self.state = REPORTING
        suspicion = self.suspicion
        self.locator.stop()
        self.last_finding = finding
        if finding.kind == MISSING_NO_GRAD:
            self._forward_dismissals = 0
            message = no_grad_message(finding.nodes_made, finding.bytes_made, 2, finding.site)
            self._back_to_watching()
            self.emit(message, NoGradWarning, finding.key, finding.site)
            return
        self._reports += 1
        growth = self.detector.growth()
        if suspicion.kind == UNUSED_GROWTH:
            growth = (suspicion.nodes, suspicion.nbytes, 1, False)
        self.detector.forget()
        self._quiet_until = record.iteration + 10 * 2 ** min(self._reports, 6)
        message = graph_leak_message(finding, growth, record.iteration, record.live_nodes, self._adding)
        self._back_to_watching()
        self.emit(message, GraphLeakWarning, finding.key, finding.site or finding.created_site)

    def _false_alarm(self, iteration):
        self.locator.stop()
        if self.suspicion.kind == UNTRAINED_FORWARD:
            self._forward_dismissals += 1
            self._forward_runs_to_skip = min(2 ** self._forward_dismissals - 1, 15)
        else:
            self._false_alarms += 1
            self.detector.forget()
            self._quiet_until = iteration + 4 * 2 ** min(self._false_alarms, 4)
        self._back_to_watching()

    def _back_to_watching(self):
        self.state = WATCHING
        self.suspicion = None

    def close(self):
        """Stop any search in progress (restores needle's unobserved fast path)."""
        self.locator.stop()
        self._back_to_watching()

    # ---- reading the evidence -------------------------------------------------------------
    def _untrained_forward_finding(self, record):
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
        sites = collections.Counter(r.loop_site for r in readers if r.loop_site is not None)
        site = min(sites, key=lambda s: (-sites[s], s[1])) if sites else None
        finding = Finding(MISSING_NO_GRAD, site, iteration=record.iteration)
        finding.nodes_made = len(records)
        finding.bytes_made = sum(r.nbytes for r in records)
        finding.kept_alive = any(r.ref() is not None for r in records)
        return finding

    def _growth_finding(self, iteration, loop_frame):
        locator = self.locator
        alive = locator.alive()
        retained = locator.retained(alive, iteration)
        if not retained:
            return None
        self._adding = None
        newest = max(r.iteration for _, r in retained)
        kept = tuple(node for node, r in alive if r.iteration == newest)
        crossings = locator.crossings(alive)
        if crossings:
            return self._carried_finding(crossings, alive, iteration, loop_frame, kept, newest)
        used = {id(x) for node, _ in alive for x in node.inputs}
        roots = [node for node, r in retained if r.iteration == newest and id(node) not in used]
        container, held = locator.containers_holding(roots, own=[alive, retained, roots])
        scalar = _is_scalar(held if held is not None else (roots or kept)[0])
        record_of = {id(node): r for node, r in retained}
        if container is not None:
            created = record_of[id(held)].site
            adding = find_adding_line(container, loop_frame)
            self._adding = adding
            name = adding.container_expression if adding else name_held_in_frames(container, loop_frame)
            return Finding(
                CONTAINER,
                adding.site if adding else None,
                created_site=created,
                container_name=name,
                scalar=scalar,
                retained_nodes=kept,
                iteration=newest,
            )
        site = record_of[id(roots[0])].site if roots else retained[0][1].site
        return Finding(HELD, site, created_site=site, scalar=scalar, retained_nodes=kept, iteration=newest)

    def _carried_finding(self, crossings, alive, iteration, loop_frame, kept, newest):
        by_site = collections.Counter(earlier.site for _, _, _, earlier in crossings if earlier.site is not None)
        if not by_site:
            return None
        site = min(by_site, key=lambda s: (-by_site[s], s[1]))
        chosen = next(earlier for _, _, _, earlier in crossings if earlier.site == site)
        state = any(fed_forward(consumer) for consumer, _, _, _ in crossings)
        carried_sites = {earlier.site for _, _, _, earlier in crossings}
        latest = max(r.iteration for _, r in alive)
        current = [node for node, r in alive if r.iteration == latest and r.site in carried_sites]
        holders, is_tuple = _holders(current, loop_frame) if state else ((), False)
        if state and holders and chosen.loop_site is not None:
            site = chosen.loop_site
        return Finding(
            CARRIED_STATE if state else ACCUMULATION,
            site,
            holders=holders,
            state_is_tuple=is_tuple,
            scalar=_is_scalar(current[0]) if current else True,
            retained_nodes=kept,
            iteration=newest,
        )


def _holders(current, loop_frame):
    """The loop's local names bound to the carried state, and whether it is a tuple of tensors."""
    if loop_frame is None or not current:
        return (), False
    ids = {id(node) for node in current}
    names, is_tuple = [], False
    for name, value in list(loop_frame.f_locals.items()):
        if id(value) in ids:
            names.append(name)
        elif isinstance(value, (tuple, list)) and any(id(item) in ids for item in value):
            names.append(name)
            is_tuple = True
    if is_tuple and len(names) > 1:
        names = [n for n in names if isinstance(loop_frame.f_locals[n], (tuple, list))][:1]
    return tuple(names), is_tuple


def _is_scalar(node):
    try:
        return math.prod(node.shape) == 1
    except Exception:  # noqa: BLE001  (a lazy node without data: advise in general words)
        return False
