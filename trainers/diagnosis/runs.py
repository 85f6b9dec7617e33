"""When a monitored loop starts again: a new run, which the diagnosis meets afresh.

A run is one pass of a loop that steps the monitor. A new one starts

- at each ``monitor.watch(...)`` and at each ``Trainer.fit`` (``mark()``), and
- at a step made from code never seen stepping this monitor: the code objects of the frames that
  step it (the loop, and what called it, up to 12 frames out) differ. A re-run notebook cell is compiled anew, so
  its steps come from new code even where a function defined in another cell runs the loop.

Steps that alternate between loops already seen (a training loop and an evaluation helper that both
step the monitor) stay in one run. A function called again from the same line of the same code is
the same run: iterate ``monitor.watch(...)`` there to make each call a run of its own.

Example:
    >>> import sys
    >>> runs = RunBoundary()
    >>> def loop():
    ...     return [runs.is_new(sys._getframe()) for _ in range(2)]
    >>> loop(), loop()
    ([True, False], [False, False])
    >>> runs.mark(); loop()
    [True, False]
"""
import collections
import operator

STACK_DEPTH = 12  # frames, from the one that stepped outward, that make a step's place


def _codes(frame):
    # NOTE: needle's and the trainers' own frames (watch(), a Trainer's loop) are kept too: their code
    # is the same at every step, so they change no place, and not filtering them keeps a step cheap.
    codes = []
    while frame is not None and len(codes) < STACK_DEPTH:
        codes.append(frame.f_code)
        frame = frame.f_back
    return codes


def _same(a, b):
    # NOTE: by identity: two compilations of one cell's source compare equal as code objects
    return len(a) == len(b) and all(map(operator.is_, a, b))


class RunBoundary:
    """Tells, step by step, whether a step starts a new run."""

    def __init__(self, remembered=16):
        self._last = None
        self._seen = collections.deque(maxlen=remembered)  # the places steps came from in this monitor's life
        self._marked = True  # the first step starts the first run

    def mark(self) -> None:
        """The next step starts a new run (``watch()``, ``Trainer.fit``)."""
        self._marked = True

    def is_new(self, frame) -> bool:
        """Whether the step made from ``frame`` starts a new run."""
        place = _codes(frame)
        if self._last is not None and _same(place, self._last) and not self._marked:
            return False
        known = any(_same(place, seen) for seen in self._seen)
        if not known:
            self._seen.append(place)
        new = self._marked or not known
        self._marked = False
        self._last = place
        return new
