"""Decides from the per-iteration counters alone when to suspect a leak: O(1) work per step.

- ``"retained"``: live spent nodes (graph nodes a backward() already used) grew at every one of
  the last few steps. A training loop frees each iteration's graph, so they stay flat.
- ``"pending"``: live graph nodes grew at every step for a long run with no backward() at all
  (a graph accumulated and never used). Summing up to 32 micro-batch losses before one backward
  looks like this for a while, so this waits longer.
- ``"no_grad"``: iterations keep making graph nodes, never call backward(), and free them again
  (an evaluation loop without ``no_grad``).
"""
import collections


class LeakDetector:
    """Watches the counters of each step and names a suspicion, or None."""

    def __init__(self, growth_steps=3, pending_steps=40, no_grad_steps=3):
        self.growth_steps = growth_steps
        self.pending_steps = pending_steps
        self.no_grad_steps = no_grad_steps
        self._spent_growth = 0
        self._pending_growth = 0
        self._no_grad_run = 0
        self._previous = None
        self._last_spent = self._last_live = 0  # the previous step's counts (lowered by a collection)
        self.quiet_until = -1  # no suspicion before this iteration (backoff after a check)
        self.spent_history = collections.deque(maxlen=16)
        self.bytes_history = collections.deque(maxlen=16)
        self.live_history = collections.deque(maxlen=16)

    def observe(self, record):
        previous = self._previous
        self._previous = record
        self.spent_history.append(record.live_spent_nodes)
        self.bytes_history.append(record.live_bytes)
        self.live_history.append(record.live_nodes)
        last_spent, last_live = self._last_spent, self._last_live
        self._last_spent, self._last_live = record.live_spent_nodes, record.live_nodes
        if previous is None:
            return None
        grew = record.live_nodes > last_live
        no_backward = record.backward_calls == 0
        self._spent_growth = self._spent_growth + 1 if record.live_spent_nodes > last_spent else 0
        self._pending_growth = self._pending_growth + 1 if grew and no_backward else 0
        freed_again = record.nodes_created > 0 and no_backward and not grew
        self._no_grad_run = self._no_grad_run + 1 if freed_again else 0
        if record.iteration < self.quiet_until:
            return None
        if self._spent_growth >= self.growth_steps:
            return "retained"
        if self._pending_growth >= self.pending_steps:
            return "pending"
        if self._no_grad_run >= self.no_grad_steps:
            return "no_grad"
        return None

    def growth_per_iteration(self, steps=None, all_nodes=False):
        """Average growth of live spent nodes (all live nodes) and of live bytes per iteration."""
        spent, nbytes = list(self.live_history if all_nodes else self.spent_history), list(self.bytes_history)
        steps = min(steps or len(spent) - 1, len(spent) - 1)
        if steps <= 0:
            return 0, 0
        return (spent[-1] - spent[-1 - steps]) / steps, (nbytes[-1] - nbytes[-1 - steps]) / steps

    def dismiss(self, suspicion, live_spent_nodes, live_nodes, recheck_next_step=False):
        """The growth was garbage that a collection freed: count again from the collected counts.

        With ``recheck_next_step`` one more step of growth raises the suspicion again (used when
        there was no earlier collected count to compare with).
        """
        self._last_spent, self._last_live = live_spent_nodes, live_nodes
        self._spent_growth = self.growth_steps - 1 if recheck_next_step and suspicion == "retained" else 0
        self._pending_growth = self.pending_steps - 1 if recheck_next_step and suspicion == "pending" else 0

    def reset(self, quiet_until):
        self._spent_growth = self._pending_growth = self._no_grad_run = 0
        self.quiet_until = quiet_until
