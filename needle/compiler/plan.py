"""Plan: the static replay of one capture.

A plan is the recorder's steps minus those whose results nobody observes, over buffers that
were allocated once at capture. Replaying copies the new inputs into the input buffers and calls
each step; a step is one in-place array call (``out=``), so a replay builds no graph node and
dispatches no op.
"""
import numpy


class ReplayMismatch(Exception):
    """A value that needle's own code read during capture (a label range check) differs now."""

    def __init__(self, guard, undoable):
        super().__init__(guard.where)
        self.guard = guard
        self.undoable = undoable


class Plan:
    """The steps of one capture, ready to replay.

    Args:
        steps: the recorder's steps, in order.
        guards: ``(position, Guard)`` pairs from the recorder.
        input_buffers: the arrays the inputs are copied into, in argument order.
        observed: ids of the root buffers a caller can see after a replay (outputs, state).
        writebacks: ``(source, target)`` pairs copied at the end (state that the step replaced
            by a new array, copied back into the array the next replay reads).
        known: ids of persistent buffers (inputs, state).
    """

    def __init__(self, steps, guards, input_buffers, observed, writebacks, known):
        self.input_buffers = input_buffers
        self.writebacks = writebacks
        for source, target in writebacks:
            numpy.copyto(target, source)  # the next replay reads the state the capture left
        guard_steps = {}
        for position, guard in guards:
            guard_steps.setdefault(position, []).append(guard)
        live = set(observed) | {id(_root(source)) for source, _ in writebacks}
        for position, guard_list in guard_steps.items():
            for guard in guard_list:
                live.add(id(_root(guard.array)))
        kept = []
        for index in range(len(steps) - 1, -1, -1):
            step = steps[index]
            if step.effect or step.writes & live:
                live |= step.reads
                live |= step.writes
                kept.append((index, step))
        kept.reverse()
        self.dropped = len(steps) - len(kept)
        # A failed guard can be undone (and the call run eagerly) while no step before it has
        # changed persistent state other than the state that writebacks restore.
        persistent = set(known) - {id(_root(t)) for _, t in writebacks} - {id(_root(b)) for b in input_buffers}
        runs, state_touched, positions, cursor = [], False, sorted(guard_steps), 0
        for index, step in kept:
            while cursor < len(positions) and positions[cursor] <= index:
                runs.extend(_guard_check(g, undoable=not state_touched) for g in guard_steps[positions[cursor]])
                cursor += 1
            runs.append(step.run)
            if (step.effect and not step.writes) or step.writes & persistent:
                state_touched = True
        for position in positions[cursor:]:
            runs.extend(_guard_check(g, undoable=not state_touched) for g in guard_steps[position])
        self.runs = tuple(runs)
        self.steps_recorded = len(steps)

    def __len__(self):
        return len(self.runs)

    def replay(self, input_arrays):
        """Copy ``input_arrays`` into the input buffers and run every step."""
        copyto = numpy.copyto
        for buffer, array in zip(self.input_buffers, input_arrays):
            copyto(buffer, array)
        for run in self.runs:
            run()
        for source, target in self.writebacks:
            copyto(target, source)

    def undo_writebacks(self):
        """After a failed guard: put back the state the replay began from."""
        for source, target in self.writebacks:
            numpy.copyto(source, target)


def _guard_check(guard, undoable):
    def check():
        if not guard.holds():
            raise ReplayMismatch(guard, undoable)

    return check


def _root(array):
    while isinstance(array.base, numpy.ndarray):
        array = array.base
    return array
