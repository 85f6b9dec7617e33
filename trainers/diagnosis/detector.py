"""Suspicions from the per-iteration counters alone: O(1) work per step, trends not streaks.

A *settled* step is one whose iteration called backward(), or made no graph node at all: what
is alive at its end is what the loop keeps. In a healthy loop the live graph nodes at settled
steps stay within a band; a leak makes them reach new highs again and again, at whatever
cadence it adds to the kept graph. So:

- ``growth``: a settled step's live graph nodes exceed every settled step of the recent window,
  for the second time within that window (growth every iteration, or every k-th, k <= 16).
- ``unused_growth``: live graph nodes grew over ``unused_steps`` consecutive iterations without
  any backward() (a graph built and kept, never used). Summing up to 64 micro-batch losses
  before one backward looks like this for a while, so this waits longer.
- ``untrained_forward``: an iteration made graph nodes and called no backward(): maybe an
  evaluation without ``no_grad``, maybe a micro-batch summed for a later backward. The locator
  tells which.
"""
import collections
from typing import Optional

from .evidence import GROWTH, UNTRAINED_FORWARD, UNUSED_GROWTH, Suspicion


class LeakDetector:
    """Keeps a window of settled counts and the latest growth events; names a suspicion or None.

    Evidence only: it never decides what to do about a suspicion (``trainers.diagnosis.machine`` does).
    """

    def __init__(self, window: int = 16, unused_steps: int = 80):
        self.window = window
        self.unused_steps = unused_steps
        self._settled = collections.deque(maxlen=window)  # live graph nodes at recent settled steps
        self._events = collections.deque(maxlen=2)  # (iteration, live nodes, live bytes, spent nodes)
        self._first_event = None  # the first growth event since the last forget()
        self._event_count = 0
        self._unsettled_run = 0
        self._run_start_nodes = 0
        self._run_start_bytes = 0
        self._last_settled_bytes = 0

    def observe(self, record) -> Optional[Suspicion]:
        """Read one step's record; return a Suspicion, or None."""
        live = record.live_nodes
        if record.backward_calls == 0 and record.nodes_created > 0:
            self._unsettled_run += 1
            if self._unsettled_run == 1:
                self._run_start_nodes = live - record.nodes_created + record.nodes_freed
                self._run_start_bytes = self._last_settled_bytes
                signature = (record.nodes_created, record.nodes_created - record.nodes_freed)
                return Suspicion(UNTRAINED_FORWARD, record.iteration, signature=signature)
            if self._unsettled_run >= self.unused_steps and live > self._run_start_nodes:
                grown = live - self._run_start_nodes
                self._unsettled_run = 0
                return Suspicion(
                    UNUSED_GROWTH,
                    record.iteration,
                    nodes=grown / self.unused_steps,
                    nbytes=(record.live_bytes - self._run_start_bytes) / self.unused_steps,
                    baseline=self._run_start_nodes,
                )
            return None
        self._unsettled_run = 0
        self._last_settled_bytes = record.live_bytes
        settled = self._settled
        baseline = max(settled) if settled else live
        grew = live > baseline
        settled.append(live)
        if not grew:
            return None
        event = (record.iteration, live, record.live_bytes, record.live_spent_nodes)
        previous = self._events[-1] if self._events else None
        self._events.append(event)
        if previous is None or event[0] - previous[0] > self.window:
            self._first_event, self._event_count = event, 0
        self._event_count += 1
        if previous is None or event[0] - previous[0] > self.window:
            return None
        every = event[0] - previous[0]
        return Suspicion(
            GROWTH,
            record.iteration,
            nodes=event[1] - previous[1],
            nbytes=event[2] - previous[2],
            every=every,
            used_by_backward=event[3] > previous[3],
            baseline=baseline,
        )

    @property
    def unsettled_run(self) -> int:
        """Consecutive iterations, up to now, that made graph nodes without a backward()."""
        return self._unsettled_run

    def growth(self):
        """``(nodes, bytes, every, used_by_backward)``: growth per event, averaged over the events since
        the growth began, and the mean number of iterations between events."""
        first, last = self._first_event, self._events[-1] if self._events else None
        if first is None or last is None or last[0] == first[0]:
            return 0, 0, 1, False
        gaps = self._event_count - 1
        return (last[1] - first[1]) / gaps, (last[2] - first[2]) / gaps, (last[0] - first[0]) / gaps, last[3] > first[3]

    def forget(self) -> None:
        """Start afresh (after a report or a false alarm): growth must recur twice again."""
        self._events.clear()
        self._first_event, self._event_count = None, 0
        self._unsettled_run = 0
