"""Quiet periods: after a report or a false alarm, the same growth is left alone for a while.

A growth is known by its rate (graph nodes kept per iteration) and, once located, by its finding's
key. A suspicion growing at the rate of a growth just reported (or dismissed) is that growth going
on and is not located again until its quiet period ends; a growth at another rate is something new
and is located at once, however recently anything else was reported. Each period doubles every
time the same growth comes back.

Example:
    >>> from trainers.diagnosis.evidence import GROWTH, Suspicion
    >>> quiet = QuietPeriods()
    >>> quiet.reported(Suspicion(GROWTH, 20, nodes=8), ("container", ("loop.py", 9), "curve"), iteration=22)
    >>> quiet.silences(Suspicion(GROWTH, 25, nodes=8)), quiet.silences(Suspicion(GROWTH, 25, nodes=20))
    (True, False)
"""

REPORTED_FOR = 10  # iterations of quiet after a report, doubled each time the same growth is reported
DISMISSED_FOR = 4  # after a false alarm, doubled each time it recurs
SAME_RATE = 0.05  # rates within this fraction of each other are the same growth (a steady leak repeats its rate exactly)


def rate(suspicion):
    """Graph nodes the suspected growth keeps per iteration."""
    return suspicion.nodes / max(suspicion.every, 1)


class _Period:
    __slots__ = ("key", "rates", "until", "count")

    def __init__(self, key):
        self.key, self.rates, self.until, self.count = key, [], -1, 0

    def matches(self, value):
        return any(abs(value - known) <= SAME_RATE * max(abs(value), abs(known)) for known in self.rates)


class QuietPeriods:
    """The quiet periods in force, one per growth reported or dismissed (the latest few)."""

    def __init__(self, kept=8):
        self._periods = []
        self._kept = kept

    def silences(self, suspicion) -> bool:
        """Whether ``suspicion`` is a growth in its quiet period."""
        value = rate(suspicion)
        return any(p.until > suspicion.iteration and p.matches(value) for p in self._periods)

    def silences_finding(self, key, iteration) -> bool:
        """Whether a finding with ``key`` was reported so recently that it is still quiet."""
        return key is not None and any(p.key == key and p.until > iteration for p in self._periods)

    def reported(self, suspicion, key, iteration):
        """A growth was reported as the finding ``key`` at ``iteration``."""
        self._lengthen(suspicion, key, iteration, REPORTED_FOR, 6)

    def dismissed(self, suspicion, iteration):
        """A growth suspicion was located and nothing was found by ``iteration`` (a false alarm)."""
        self._lengthen(suspicion, None, iteration, DISMISSED_FOR, 4)

    def also_known_as(self, suspicion, key):
        """``suspicion`` was located as ``key``'s growth within its quiet period: note its rate too."""
        period = next(p for p in self._periods if p.key == key)
        period.rates.append(rate(suspicion))

    def clear(self):
        self._periods = []

    def _lengthen(self, suspicion, key, iteration, length, most_doublings):
        value = rate(suspicion)
        if key is not None:
            period = next((p for p in self._periods if p.key == key), None)
        else:
            period = next((p for p in self._periods if p.key is None and p.matches(value)), None)
        if period is None:
            period = _Period(key)
            self._periods = (self._periods + [period])[-self._kept:]
        period.count += 1
        period.rates = (period.rates + [value])[-4:]
        period.until = iteration + length * 2 ** min(period.count, most_doublings)
