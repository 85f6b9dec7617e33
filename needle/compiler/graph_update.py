"""An optimizer step inside a captured CUDA graph: its update kernels recorded, its scalars fresh.

While :func:`needle.compiler.cuda_graph.capture_cuda` captures a step, each ``opt.step()`` of
an SGD or Adam whose parameters share one device and float dtype is recorded into the graph
being captured, as the kernels its eager step launches, in their table-reading form
(:mod:`needle.compiler.scalar_table`). A replay is then one graph launch: before it,
:meth:`GraphUpdate.before_launch` does on the host what the eager step does besides its kernels
(counts the step, gives pending deferred gradients their copies of the weights, reads
``opt.lr``, rescales SGD's velocities to a new momentum, advances Adam's ``t``) and puts the
step's scalars in the row its kernels read.

The kernels bake the arrays they were captured with: :meth:`GraphUpdate.ready` says whether
the optimizer still holds them (the same parameter list, the same velocity or moment arrays,
momentum still on or still off), and a plan whose update is not ready captures again, as a
plan whose model was changed does.
"""
from .. import updated_parameters
from ..backend_ndarray.cuda_kernels import ADAM_SCALARS, MOMENTUM_SCALARS, SGD_SCALARS
from ..deferred import keep_values_before_update
from ..optim.adam import Adam
from ..optim.optimizer import _read_gradients
from ..optim.sgd import SGD
from .scalar_table import ROWS_AHEAD, ScalarTable


class GraphUpdate:
    """One recorded optimizer step of a captured graph (see the module docstring)."""

    def __init__(self, opt, routine, weights, states, table):
        self.opt = opt
        self.routine = routine  # "sgd", "momentum" or "adam"
        self.table = table
        self._params = opt.params
        self._count = len(opt.params)
        self._weights = weights
        self._states = states  # ((state dict, ((param, array), ...)), ...): what the kernels update

    @classmethod
    def record(cls, opt, upload):
        """Record ``opt``'s step into the capture running now and return its GraphUpdate; None,
        recording nothing, where the step cannot be replayed this way (an optimizer other than
        SGD or Adam, a subclass, parameters of several devices or dtypes, state not made yet):
        it is then a host call, as before."""
        kind = type(opt)
        if kind is not SGD and kind is not Adam:
            return None
        found, mismatched = _read_gradients(opt.params)
        if mismatched or not found:
            return None
        kernels = found[0][3]
        if not hasattr(kernels, "steps_from_table") or any(entry[3] is not kernels for entry in found):
            return None
        dtype = found[0][1].dtype
        if kind is SGD:
            routine = "momentum" if float(opt.momentum) else "sgd"
            dicts = (opt.u.scaled,) if routine == "momentum" else ()
        else:
            routine, dicts = "adam", (opt.m, opt.v)
        states = tuple((state, tuple((param, state.get(param)) for param, _, _, _ in found)) for state in dicts)
        if any(array is None for _, pairs in states for _, array in pairs):
            return None
        updates = []
        for index, (param, weight, gradient, _) in enumerate(found):
            updates.append((weight, *(pairs[index][1] for _, pairs in states), gradient))
        width = len({"sgd": SGD_SCALARS, "momentum": MOMENTUM_SCALARS, "adam": ADAM_SCALARS}[routine])
        advances = routine == "adam"
        table = ScalarTable(kernels.xp, dtype, width, ROWS_AHEAD if advances else 1, upload, advances)
        if not kernels.steps_from_table(routine, updates, table):
            return None
        if advances:
            kernels.next_table_row(table)
        return cls(opt, routine, tuple(weight for _, weight, _, _ in found), states, table)

    def ready(self):
        """Whether ``opt`` still holds the arrays the recorded kernels update."""
        opt = self.opt
        if opt.params is not self._params or len(opt.params) != self._count:
            return False
        if type(opt) is SGD:
            if (float(opt.momentum) != 0) != (self.routine == "momentum"):
                return False
            dicts = (opt.u.scaled,) if self.routine == "momentum" else ()
        else:
            dicts = (opt.m, opt.v)
        for current, (state, pairs) in zip(dicts, self._states):
            if current is not state:
                return False
            for param, array in pairs:
                if state.get(param) is not array:
                    return False
        return True

    def before_launch(self):
        """What the eager step does on the host, and its scalars into the table's next row."""
        opt = self.opt
        updated_parameters.count_step()
        keep_values_before_update(self._weights)
        if self.routine == "adam":
            scalars = opt._next_step_scalars().as_tuple()
            t = opt.t
            self.table.before_launch(scalars, lambda k: opt._scalars_at(t + k).as_tuple())
            return
        lr, momentum, weight_decay, step = opt._step_scalars()
        self.table.before_launch((momentum, step, weight_decay) if momentum else (lr, weight_decay), None)
