"""Leak diagnosis: the one state machine, from cheap watching to a reported finding.

Each real state is a small class that owns its deadline; ``LeakDiagnosis`` holds the current one and
what outlives a state (quiet periods, dismissed forwards, the latest finding). A report is a
transition, not a state: it issues the warning and goes back to watching.

::

                  growth (not quiet)          ┌──────────────────┐  finding   ┌──────────────────────┐
         ┌───────────────────────────────────▶│ LocatingGrowth   │──────────▶│ report ──▶ Watching   │
         │                                    └──────────────────┘           └──────────────────────┘
     Watching                                   │ nothing by the deadline: quiet, back to Watching
         │  a forward without backward()        │ container, adding line not seen ──▶ AwaitingAddingLine
         ▼                                      ▼                                    (caught or deadline: report)
     LocatingForward ──evaluation──▶ report (NoGradWarning)
         │  (one iteration tells)
         ├──kept losses──▶ AwaitingBackward ──dropped, or no backward() in 16──▶ report (NoGradWarning)
         │                                 └──a backward() used them──▶ dismissed (Watching)
         ├──a chain reading no weight──▶ AwaitingChainBackward ──no backward() in 4──▶ located as growth
         │                                                     └──a backward()──▶ dismissed (Watching)
         └──nothing──▶ dismissed (Watching; runs that start alike are skipped for a while)

- **Watching**: every step, the detector reads the O(1) counters (``trainers.diagnosis.detector``).
  A growth suspicion is located unless it grows at the rate of a growth just reported or dismissed
  (``trainers.diagnosis.quiet``); an untrained forward is checked unless it starts like a run that
  was just dismissed.
- **LocatingGrowth**: the locator notes every new node with its iteration and user lines
  (``trainers.diagnosis.locator``) until a node outlives a whole iteration (a finding) or the
  deadline passes (long enough to see the growth recur at its cadence).
- **LocatingForward**: an iteration made graph nodes and called no backward(); the next iteration's
  nodes tell an evaluation without no_grad from a summed micro-batch or a forward through no weight.
- **AwaitingBackward**: that iteration kept one-element results: micro-batch losses for a later
  backward() (which spends them), or an evaluation's results (dropped, or never backpropagated).
- **AwaitingChainBackward**: its nodes read no weight but are summed onto earlier iterations' (the
  lecture's ``sum_loss = sum_loss + x * x``): a backward() within a few iterations makes them summed
  micro-batches; otherwise the chain is located as a growth.
- **AwaitingAddingLine**: a container holds the graphs, and the line that adds to it was not on the
  stack; it is caught as it runs (about one cadence), then reported.

A new run (``trainers.diagnosis.runs``: a re-run cell, ``watch()``, ``Trainer.fit``) starts from
Watching with no quiet period and nothing dismissed, so a re-run leak warns again.

Beside the states, at every step, ``WastedGraphs`` (``trainers.diagnosis.wasted``) reads the wasted-node
counters of every iteration, training or not (evaluations without no_grad, frozen models). The
detector and the locator hold evidence only; every decision is made by the states.
"""
from typing import Callable, Optional

from needle import autograd

from . import findings
from .adding_line import AddingLineWatcher
from .detector import LeakDetector
from .evidence import CONTAINER, MISSING_NO_GRAD, UNTRAINED_FORWARD, UNUSED_GROWTH, Finding, Suspicion
from .locator import LeakLocator
from .quiet import QuietPeriods
from .report import freeze, graph_leak_message, no_grad_message
from .runs import RunBoundary
from .wasted import WastedGraphs
from .warnings import GraphLeakWarning, NoGradWarning

SLOWEST_CADENCE = 8  # iterations between additions to a leak that the locator waits to see
KEPT_LOSSES_WAIT = 16  # iterations kept losses wait for the backward() that uses them
CHAIN_WAIT = 4  # iterations a chain that reads no weight waits for a backward()


# ---- the states --------------------------------------------------------------------------------
class Watching:
    """Reading the counters; a suspicion starts a search."""

    name = "watching"
    deadline = None

    def step(self, diagnosis, record, suspicion, frame):
        if suspicion is not None:
            diagnosis.suspected(suspicion, record)


class LocatingGrowth:
    """Noting new nodes until one outlives a whole iteration, or the deadline."""

    name = "locating_growth"

    def __init__(self, suspicion, iteration):
        self.suspicion = suspicion
        # NOTE: growth can be garbage in reference cycles; the locator collects before it looks, so
        # such a suspicion ends as a false alarm. One growth can show as two steps of growth (the
        # local that held the graph lets go one iteration later), so the measured cadence may be too
        # short: look for at least as long as the slowest cadence the detector is meant to catch.
        self.deadline = iteration + 2 + max(min(suspicion.every, 16), SLOWEST_CADENCE)

    def step(self, diagnosis, record, suspicion, frame):
        frames = findings.user_frames(frame)
        evidence = findings.growth(diagnosis.locator, record.iteration, frames)
        if evidence.finding is not None:
            diagnosis.found_growth(self.suspicion, evidence, record, frames)
        elif record.iteration >= self.deadline:
            diagnosis.growth_dismissed(self.suspicion, record.iteration)
        else:
            diagnosis.locator.advance(record.iteration + 1)


class LocatingForward:
    """One iteration without backward() tells what the next one's nodes are."""

    name = "locating_forward"

    def __init__(self, suspicion, iteration):
        self.suspicion = suspicion
        self.deadline = iteration + 1

    def step(self, diagnosis, record, suspicion, frame):
        verdict = findings.untrained_forward(diagnosis.locator, record, findings.user_frames(frame))
        if verdict.losses:
            diagnosis.locator.stop()  # the verdict needs only these losses
            diagnosis.enter(AwaitingBackward(self.suspicion, verdict.finding, verdict.losses, record.iteration))
        elif verdict.finding is not None:
            diagnosis.found_no_grad(verdict.finding, record)
        elif verdict.chain:
            diagnosis.locator.advance(record.iteration + 1)
            diagnosis.enter(AwaitingChainBackward(self.suspicion, record))
        elif record.iteration >= self.deadline:
            diagnosis.forward_dismissed(self.suspicion)
        else:
            diagnosis.locator.advance(record.iteration + 1)


class AwaitingBackward:
    """Losses kept without backward(): gathered for one later backward(), or an evaluation's."""

    name = "awaiting_backward"

    def __init__(self, suspicion, finding, losses, iteration):
        self.suspicion, self.finding = suspicion, finding
        self.losses = losses  # weak references until the next step; then the losses still held
        self.held = None
        self.deadline = iteration + KEPT_LOSSES_WAIT

    def step(self, diagnosis, record, suspicion, frame):
        if self.held is None:
            self.held = [node for node in (ref() for ref in self.losses) if node is not None]
            if not self.held:
                return diagnosis.found_no_grad(self.finding, record)  # dropped: an evaluation without no_grad
        if record.backward_calls > 0:
            if all(autograd.is_spent(node) for node in self.held):
                return diagnosis.forward_dismissed(self.suspicion)  # the backward() used them: accumulation
            return diagnosis.found_no_grad(self.finding, record)
        if record.iteration >= self.deadline:
            diagnosis.found_no_grad(self.finding, record)


class AwaitingChainBackward:
    """A graph summed across iterations that reads no weight, waiting a few iterations for a backward()."""

    name = "awaiting_chain_backward"

    def __init__(self, suspicion, record):
        self.suspicion = suspicion
        self.start = record
        self.deadline = record.iteration + CHAIN_WAIT

    def step(self, diagnosis, record, suspicion, frame):
        if record.backward_calls > 0:
            return diagnosis.forward_dismissed(self.suspicion)  # summed micro-batches, now used
        if record.iteration < self.deadline:
            return diagnosis.locator.advance(record.iteration + 1)
        frames = findings.user_frames(frame)
        evidence = findings.growth(diagnosis.locator, record.iteration, frames)
        if evidence.finding is None:
            return diagnosis.forward_dismissed(self.suspicion)
        iterations = record.iteration - self.start.iteration
        growth = Suspicion(
            UNUSED_GROWTH,
            record.iteration,
            nodes=(record.live_nodes - self.start.live_nodes) / iterations,
            nbytes=(record.live_bytes - self.start.live_bytes) / iterations,
        )
        diagnosis.skip_runs_like(self.suspicion)  # the chain goes on: its next runs are the same leak
        diagnosis.found_growth(growth, evidence, record, frames)


class AwaitingAddingLine:
    """A container finding, waiting (an iteration or a cadence) for the line that adds to it."""

    name = "awaiting_adding_line"

    def __init__(self, suspicion, finding, iteration, cadence):
        self.suspicion, self.finding = suspicion, finding
        self.deadline = iteration + 1 + min(max(round(cadence), 1), 16)

    def step(self, diagnosis, record, suspicion, frame):
        watcher = diagnosis.watcher
        caught = watcher.caught
        if caught is None and record.iteration < self.deadline:
            return
        watcher.stop()
        finding, adding = self.finding, None
        if caught is not None:
            finding.site = caught.site
            if caught.container_expression is not None:
                finding.container_name = caught.container_expression
                adding = caught
        diagnosis.report_growth(self.suspicion, finding, adding, record)


# ---- the owner ---------------------------------------------------------------------------------
class LeakDiagnosis:
    """Owns the diagnosis state; ``observe`` advances it by one monitored step.

    Args:
        emit: ``emit(message, category, key, site)`` issues a warning (the monitor's warn mode).
        on_new_run: called when a step starts a new run (the monitor forgets what it warned).

    Example:
        >>> diagnosis = LeakDiagnosis(emit=print)
        >>> diagnosis.state
        'watching'
    """

    def __init__(self, emit: Callable, on_new_run: Optional[Callable] = None):
        self.emit = emit
        self.on_new_run = on_new_run
        self.runs = RunBoundary()
        self.locator = LeakLocator()
        self.watcher = AddingLineWatcher()  # catches the line adding to a container as it runs
        self.last_finding: Optional[Finding] = None
        self._start_run()

    @property
    def state(self) -> str:
        """The current state's name: ``"watching"``, ``"locating_growth"``, ``"locating_forward"``,
        ``"awaiting_backward"``, ``"awaiting_chain_backward"`` or ``"awaiting_adding_line"``."""
        return self.current.name

    def _start_run(self):
        self.current = Watching()
        self.detector = LeakDetector()
        self.quiet = QuietPeriods()
        self.wasted = WastedGraphs()  # forwards through parameters freed with no backward() through them
        self._forward_runs_to_skip = 0  # untrained-forward runs left unchecked (after dismissals)
        self._forward_dismissals = 0
        self._dismissed_signature = None  # how the last dismissed run's first iteration looked
        self._no_grad_reported = (None, -1)  # (site, iteration) of the latest NoGradWarning, from either path

    def new_run(self) -> None:
        """Start afresh, as for a new loop: no search, quiet period or dismissal carries over."""
        self.close()
        self._start_run()
        if self.on_new_run is not None:
            self.on_new_run()

    # ---- one step ---------------------------------------------------------------------------
    def observe(self, record, caller_frame, wasted=(0, 0)) -> None:
        """Advance by one step: ``record`` is the step's counters, ``caller_frame`` the frame that stepped,
        ``wasted`` the step's ``trainers.diagnosis.wasted.WastedCounts`` (wasted, frozen and small graphs)."""
        if self.runs.is_new(caller_frame):
            self.new_run()
        # NOTE: in any iteration, training or not; an evaluation the untrained-forward path also
        # reports is warned once (``_no_grad_just_reported``, and the same finding key).
        site = self.wasted.observe(record.iteration, wasted, caller_frame)
        if site is not None:
            finding = Finding(MISSING_NO_GRAD, site, iteration=record.iteration)
            if not self._no_grad_just_reported(site, record.iteration):
                self.emit(self.wasted.message(site), NoGradWarning, finding.key, site)
        suspicion = self.detector.observe(record)
        self.current.step(self, record, suspicion, caller_frame)

    def enter(self, state) -> None:
        self.current = state

    # ---- transitions the states ask for -----------------------------------------------------
    def suspected(self, suspicion, record):
        """Watching saw ``suspicion``: start locating, unless it is quiet or like a dismissed run."""
        if suspicion.kind == UNTRAINED_FORWARD:
            if self._forward_runs_to_skip > 0 and suspicion.signature == self._dismissed_signature:
                self._forward_runs_to_skip -= 1
                return
            state = LocatingForward(suspicion, record.iteration)
        elif self.quiet.silences(suspicion):
            return
        else:
            state = LocatingGrowth(suspicion, record.iteration)
        self.locator.start(record.iteration + 1)
        self.enter(state)

    def found_growth(self, suspicion, evidence, record, frames):
        """A growth finding: reported now, or once the line adding to its container is caught."""
        finding = evidence.finding
        self.locator.stop()
        if finding.kind == CONTAINER and evidence.adding is None:
            if self.watcher.start(evidence.container, frames[0] if frames else None):
                cadence = self.detector.growth()[2]
                return self.enter(AwaitingAddingLine(suspicion, finding, record.iteration, cadence))
        self.report_growth(suspicion, finding, evidence.adding, record)

    def report_growth(self, suspicion, finding, adding, record):
        """Issue the GraphLeakWarning for ``finding`` (unless that very leak is in its quiet period)."""
        self.locator.stop()
        growth = self.detector.growth()
        if suspicion.kind == UNUSED_GROWTH:
            growth = (suspicion.nodes, suspicion.nbytes, 1, False)
        self.detector.forget()
        self.enter(Watching())
        if self.quiet.silences_finding(finding.key, record.iteration):
            self.quiet.also_known_as(suspicion, finding.key)  # the reported leak, going on at another rate
            return
        self.quiet.reported(suspicion, finding.key, record.iteration)
        self.last_finding = finding
        message = graph_leak_message(finding, growth, record.iteration, record.live_nodes, adding)
        freeze(finding)  # the finding keeps text and DOT; its nodes only weakly
        self.emit(message, GraphLeakWarning, finding.key, finding.site or finding.created_site)

    def found_no_grad(self, finding, record):
        """Issue the NoGradWarning for an evaluation without no_grad."""
        self.locator.stop()
        self.last_finding = finding
        self._forward_dismissals = 0
        message = no_grad_message(finding.nodes_made, finding.bytes_made, self.detector.unsettled_run, finding.site)
        self.enter(Watching())
        if not self._no_grad_just_reported(finding.site, record.iteration):
            self.emit(message, NoGradWarning, finding.key, finding.site)

    def growth_dismissed(self, suspicion, iteration):
        """Nothing outlived an iteration by the deadline: a false alarm, quiet for that growth a while."""
        self.locator.stop()
        self.detector.forget()
        self.quiet.dismissed(suspicion, iteration)
        self.enter(Watching())

    def forward_dismissed(self, suspicion):
        """Not an evaluation: runs that start like this one are skipped for a while."""
        self.locator.stop()
        self.skip_runs_like(suspicion)
        self.enter(Watching())

    def skip_runs_like(self, suspicion):
        """Leave unchecked, for a while, the untrained-forward runs that start like ``suspicion``'s."""
        if suspicion.signature != self._dismissed_signature:
            self._dismissed_signature, self._forward_dismissals = suspicion.signature, 0
        self._forward_dismissals += 1
        # NOTE: only runs that start like the dismissed one (as many nodes made and kept) are
        # skipped, so that a validation burst in a loop that sums micro-batches is still checked.
        self._forward_runs_to_skip = min(2 ** self._forward_dismissals - 1, 15)

    def _no_grad_just_reported(self, site, iteration, within=2):
        """Whether the other path (evaluation-only iterations, wasted graphs) just reported this site;
        notes this report either way, so that one evaluation gives one NoGradWarning."""
        last_site, last_iteration = self._no_grad_reported
        self._no_grad_reported = (site, iteration)
        return site == last_site and iteration - last_iteration <= within

    def close(self):
        """Stop any search in progress (restores needle's unobserved fast path)."""
        self.locator.stop()
        self.wasted.stop()
        self.watcher.stop()
        self.enter(Watching())
