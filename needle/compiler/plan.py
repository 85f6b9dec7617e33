"""Plan: the static replay of one capture.

A plan is the recorder's steps minus those whose results nobody observes, over buffers that
were allocated once at capture. Replaying copies the new inputs into the input buffers and calls
each step; a step is one in-place array call (``out=``), so a replay builds no graph node and
dispatches no op; the steps run as one generated function (:mod:`needle.compiler.replay_function`).
The steps that only the results need wait until a result is read
(:mod:`needle.compiler.deferred_results`).
"""
import weakref

import numpy

from .deferred_results import PendingResult, deferrable_steps
from .indexed_updates import merge_indexed_updates
from .input_binding import InputBinding, weak_buffers
from .recorder import Draw, root as _root
from .replay_function import replay_function


class ReplayMismatch(Exception):
    """A value that needle's own code read during capture (a label range check) differs now.

    ``draws``: the RNG draws the replay made before the check (see :func:`recorder.redrawn`)."""

    def __init__(self, guard, undoable, draws=()):
        super().__init__(guard.where)
        self.guard = guard
        self.undoable = undoable
        self.draws = draws


class Plan:
    """The steps of one capture, ready to replay.

    Args:
        steps: the recorder's steps, in order.
        guards: ``(position, Guard)`` pairs from the recorder.
        input_buffers: the arrays the inputs are copied into, in argument order.
        observed: ids of the root buffers a caller can see after a replay besides the results
            (state, gradients).
        writebacks: ``(source, target)`` pairs copied at the end (state that the step replaced
            by a new array, copied back into the array the next replay reads).
        known: ids of persistent buffers (inputs, state).
        outputs: ids of the root buffers of the results.
        private: ids of the root buffers that only the plan writes; the steps that only the
            results need, and read only these, run when a result is read
            (:mod:`needle.compiler.deferred_results`).
        buffers: id -> root array of the buffers the capture made or read as state, by which the
            input bindings tell the plan's buffers from a caller's array.
    """

    def __init__(self, steps, guards, input_buffers, observed, writebacks, known, outputs=(), private=(), buffers=None):
        self.input_buffers = input_buffers
        self.writebacks = writebacks
        for source, target in writebacks:
            numpy.copyto(target, source)  # the next replay reads the state the capture left
        guard_steps = {}
        for position, guard in guards:
            guard_steps.setdefault(position, []).append(guard)
        roots = set(observed) | {id(_root(source)) for source, _ in writebacks}
        for position, guard_list in guard_steps.items():
            for guard in guard_list:
                roots.add(id(_root(guard.array)))
        constant = _constant_steps(steps, set(known) | {id(_root(b)) for b in input_buffers})
        core = _needed(steps, roots, keep_effects=True) - constant
        wanted = _needed(steps, set(outputs), keep_effects=False) - constant
        self.constant = len(constant)
        deferred = deferrable_steps(steps, core, wanted, set(private))
        kept = [(index, steps[index]) for index in sorted((core | wanted).difference(deferred))]
        self.dropped = len(steps) - len(kept) - len(deferred)
        self.deferred_runs = tuple(steps[index].run for index in deferred)
        self.deferred_outputs = set().union(*(steps[index].writes for index in deferred)) & set(outputs)
        self._finished = True  # whether the last replay's deferred steps have run
        self._pending = []  # weak references to the last replay's pending results
        uses = {}  # root id -> how many replayed steps use it
        for step in [step for _, step in kept] + [steps[index] for index in deferred]:
            for key in step.reads | step.writes:
                uses[key] = uses.get(key, 0) + 1
        outside = roots | set(outputs)
        kept = merge_indexed_updates(kept, guard_steps, lambda key: uses.get(key, 0) != 3 or key in outside)
        # A failed guard can be undone (and the call run eagerly) while no step before it has
        # changed persistent state other than the state that writebacks restore.
        # The RNG draws before a guard (a Dropout mask) go with its mismatch: the eager call that
        # runs instead takes their values (recorder.redrawn) while they are still as drawn.
        persistent = set(known) - {id(_root(t)) for _, t in writebacks} - {id(_root(b)) for b in input_buffers}
        runs, state_touched, draws, positions, cursor = [], False, [], sorted(guard_steps), 0
        for index, step in kept:
            while cursor < len(positions) and positions[cursor] <= index:
                runs.extend(_guard_check(g, not state_touched, tuple(draws)) for g in guard_steps[positions[cursor]])
                cursor += 1
            runs.append(step.run)
            if (step.effect and not step.writes) or step.writes & persistent:
                state_touched = True
            if isinstance(step, Draw):
                draws.append(step)
            elif any(step.writes & draw.writes for draw in draws):
                state_touched = True  # a draw rewritten in place: its values are gone
        for position in positions[cursor:]:
            runs.extend(_guard_check(g, not state_touched, tuple(draws)) for g in guard_steps[position])
        self.runs = runs
        self.steps_recorded = len(steps)
        other_uses = (roots - set(observed)) | set(outputs) | {id(_root(t)) for _, t in writebacks}
        for index in deferred:
            other_uses |= steps[index].reads | steps[index].writes
        for _, step in kept:
            other_uses |= step.writes
        owned = weak_buffers(set(known) | set(private) | set(observed) | other_uses, buffers or {})
        self.bindings = [InputBinding.find(buffer, runs, other_uses, owned) for buffer in input_buffers]
        parameters = {}  # position in runs -> {argument index: (parameter, transposed)}
        for parameter, binding in enumerate(b for b in self.bindings if b is not None):
            for position, substitutions in binding.sites:
                for index, transposed in substitutions:
                    parameters.setdefault(position, {})[index] = (parameter, transposed)
        self._replay = replay_function(runs, parameters)

    def __len__(self):
        return len(self.runs)

    def replay(self, input_arrays):
        """Copy ``input_arrays`` into the input buffers (or pass them to the steps that read them
        in place, see :mod:`needle.compiler.input_binding`) and run every step but the deferred
        ones, as one call (:mod:`needle.compiler.replay_function`)."""
        if self._pending:
            self._settle()
        self._finished = not self.deferred_runs
        copyto, read_in_place = numpy.copyto, []
        for buffer, array, binding in zip(self.input_buffers, input_arrays, self.bindings):
            if binding is None:
                copyto(buffer, array)
            elif binding.accepts(array):
                read_in_place.append(array)
                binding.bound = array
            else:
                copyto(buffer, array)
                read_in_place.append(buffer)
                binding.bound = buffer
        self._replay(*read_in_place)
        for source, target in self.writebacks:
            copyto(target, source)

    def pending(self, buffer, device):
        """A result of the last replay whose buffer a deferred step writes: computed when read."""
        result = PendingResult.of(self, buffer, device)
        self._pending.append(weakref.ref(result))
        return result

    def finish(self):
        """Run the last replay's deferred steps, once."""
        if not self._finished:
            for run in self.deferred_runs:
                run()
            self._finished = True

    def _settle(self):
        """Before a replay overwrites the buffers: give every pending result still alive its value."""
        pending, self._pending = self._pending, []
        for reference in pending:
            result = reference()
            if result is not None:
                result.realize_cached_data()

    def undo_writebacks(self):
        """After a failed guard: put back the state the replay began from."""
        for source, target in self.writebacks:
            numpy.copyto(source, target)


def _needed(steps, roots, keep_effects):
    """Indices of the steps that write what ``roots`` (ids of root buffers) need, from the end back."""
    live, needed = set(roots), set()
    for index in range(len(steps) - 1, -1, -1):
        step = steps[index]
        if (keep_effects and step.effect) or step.writes & live:
            live |= step.reads
            live |= step.writes
            needed.add(index)
    return needed


def _constant_steps(steps, varying):
    """Indices of the steps whose results are the same at every replay: they read nothing that
    varies (``varying``: the inputs and the state, then what RNG draws, host calls and the steps
    reading varying buffers write) and write nothing that a varying step writes too (the seed of
    a backward pass: ``numpy.empty`` filled with ones, then scaled). The capture ran them; the
    buffers they wrote keep those values, which no replay step overwrites."""
    varying = set(varying)
    for step in steps:
        if step.effect or step.reads & varying:
            varying |= step.writes
    return {
        index for index, step in enumerate(steps)
        if not step.effect and not step.reads & varying and not step.writes & varying
    }


def _guard_check(guard, undoable, draws):
    array, value = guard.array, guard.value
    if guard.convert is bool and type(value) is bool:

        def check_truth():  # NOTE: the common guard (``if labels.max() >= classes:``), without Guard.holds's calls
            if bool(array) is not value:
                raise ReplayMismatch(guard, undoable, draws)

        return check_truth

    def check():
        if not guard.holds():
            raise ReplayMismatch(guard, undoable, draws)

    return check

