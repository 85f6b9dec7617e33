"""The device kernels (see :mod:`.kernels`) as one CuPy kernel each, for the CUDA device.

At training sizes a GPU step is bound by kernel launches, not arithmetic: the array-module
versions in :mod:`.kernels` cost 4 launches per parameter for a momentum step, 11 for Adam and
about 12 for softmax cross-entropy. Here each routine is one launch (the loss two: the rows,
then their mean), and an optimizer step updates up to SLOTS parameters in one launch (there is
no single-parameter kernel: an optimizer always hands over all of a step's parameters at once).
Kernels compile on first use and CuPy caches them on disk.

A kernel takes float32 or float64 arrays whose dtypes all match (labels: any integer type);
anything else (mixed dtypes, float16) goes to the array-module versions, which give the same
values.
"""
import numpy

from .cuda_kernels import KERNELS, SLOTS
from .kernels import ArrayRoutines, SoftmaxCrossEntropySaved

_FLOATS = (numpy.dtype(numpy.float32), numpy.dtype(numpy.float64))


class CupyKernels(ArrayRoutines):
    """The routines of :class:`ArrayRoutines`, each one CuPy kernel.

    Args:
        cupy: the CuPy module (or anything with its ``ElementwiseKernel`` and array functions).
    """

    def __init__(self, cupy):
        super().__init__(cupy)
        for attribute, spec in KERNELS.items():
            setattr(self, attribute, cupy.ElementwiseKernel(*spec))
        self._dummies = {}  # (dtype, argument position) -> arrays for unused multi-tensor slots

    # NOTE: updates_out_of_place is False here (no fused host kernels), so no caller hands over
    # a weight; ``sources``, if given, are copied into the weights first, as ArrayRoutines does.
    def sgd_steps(self, updates, lr, weight_decay, scratch, sources=None):
        _copy_sources(updates, sources)
        rest = self._in_slots(self._sgd_steps, updates, _typed(lr, weight_decay))
        super().sgd_steps(rest, lr, weight_decay, scratch)

    def momentum_steps(self, updates, momentum, step, weight_decay, scratch, sources=None):
        _copy_sources(updates, sources)
        rest = self._in_slots(self._momentum_steps, updates, _typed(momentum, step, weight_decay))
        super().momentum_steps(rest, momentum, step, weight_decay, scratch)

    def adam_steps(self, updates, hyper, scratch, sources=None):
        _copy_sources(updates, sources)
        rest = self._in_slots(self._adam_steps, updates, _typed(*hyper.as_tuple()))
        super().adam_steps(rest, hyper, scratch)

    # ---- the updates a CUDA graph replays (needle.compiler.graph_update) --------------------
    def steps_from_table(self, routine, updates, table):
        """``routine``'s update ("sgd", "momentum" or "adam"; each update as its ``*_steps``
        method takes it) with the scalars read on the device from ``table.values``, at the row
        ``table.row[0]`` names (a :class:`~needle.compiler.scalar_table.ScalarTable`).

        Returns False, and runs nothing, unless every array is of the table's float dtype.
        """
        dtype = table.values.dtype
        if not all(_same_float_dtype(*update) and update[0].dtype == dtype for update in updates):
            return False
        kernel = getattr(self, f"_{routine}_steps_from_table")
        self._in_slots(kernel, updates, lambda _: (table.values, table.row))
        return True

    def next_table_row(self, table):
        """Move ``table``'s row on by one, on the device (after the updates that read it)."""
        self._next_table_row(numpy.int64(1), table.row, size=1)

    def _in_slots(self, kernel, updates, leading):
        """Run a multi-tensor ``kernel`` over ``updates``, SLOTS parameters a launch.

        Each update is ``(weight, state..., gradient)``, as the ``*_steps`` methods take them;
        the kernel's arrays are the gradients, then each state, then the weights, slot by slot,
        after the arguments ``leading(dtype)`` gives (the scalars, or a table and its row).
        Returns the updates it cannot take (arrays not all of one float dtype).
        """
        by_dtype, rest = {}, []
        for update in updates:
            if _same_float_dtype(*update):
                by_dtype.setdefault(update[0].dtype, []).append(update)
            else:
                rest.append(update)
        for dtype, group in by_dtype.items():
            first_arguments = leading(dtype)
            for start in range(0, len(group), SLOTS):
                chunk = group[start : start + SLOTS]
                sizes = [numpy.int64(update[0].size) for update in chunk]
                sizes += [numpy.int64(0)] * (SLOTS - len(chunk))
                roles = [(update[-1], *update[1:-1], update[0]) for update in chunk]
                arrays = []
                for position in range(len(roles[0])):
                    arrays += [role[position] for role in roles]
                    arrays += self._unused_slots(dtype, position, SLOTS - len(chunk))
                total = int(sum(sizes))
                if total:
                    kernel(*first_arguments, *sizes, *arrays, size=total)
        return rest

    def _unused_slots(self, dtype, position, count):
        """Distinct one-element arrays for the empty slots (never read: their size is 0)."""
        # NOTE: shared by every caller, which is safe because no kernel reads or writes them.
        key = (dtype, position)
        dummies = self._dummies.get(key)
        if dummies is None:
            dummies = self._dummies[key] = [self.xp.zeros(1, dtype=dtype) for _ in range(SLOTS)]
        return dummies[:count]

    def relu_backward(self, out_grad, out):
        if not _same_float_dtype(out_grad, out):
            return super().relu_backward(out_grad, out)
        return self._relu_backward(out_grad, out)

    def softmax_cross_entropy(self, logits, label_ids):
        if not _same_float_dtype(logits) or label_ids.dtype.kind not in "iu" or 0 in logits.shape:
            return super().softmax_cross_entropy(logits, label_ids)
        cupy = self.xp
        logits = cupy.ascontiguousarray(logits)
        label_ids = cupy.ascontiguousarray(label_ids)
        batch, classes = logits.shape
        exp_shifted = cupy.empty_like(logits)
        totals = cupy.empty(batch, dtype=logits.dtype)
        row_losses = cupy.empty(batch, dtype=logits.dtype)
        self._softmax_cross_entropy_rows(
            logits, label_ids, numpy.int32(classes), exp_shifted, totals, row_losses
        )
        return row_losses.mean(), SoftmaxCrossEntropySaved(exp_shifted, totals, label_ids)

    def softmax_cross_entropy_gradient(self, saved, out_grad):
        exp_shifted, totals, label_ids = saved.exp_shifted, saved.totals, saved.label_ids
        if (
            not _same_float_dtype(exp_shifted, totals)
            or label_ids.dtype.kind not in "iu"
            or 0 in exp_shifted.shape
            or not (label_ids.flags.c_contiguous and exp_shifted.flags.c_contiguous)
        ):
            return super().softmax_cross_entropy_gradient(saved, out_grad)
        batch, classes = exp_shifted.shape
        out_grad = out_grad.astype(exp_shifted.dtype, copy=False).reshape(1)
        self._softmax_cross_entropy_gradient(
            totals, label_ids, out_grad, numpy.int32(classes), exp_shifted.dtype.type(1 / batch), exp_shifted
        )
        return exp_shifted


def _typed(*scalars):
    """``leading`` for :meth:`CupyKernels._in_slots`: the scalars, each as the arrays' dtype."""
    return lambda dtype: [dtype.type(value) for value in scalars]


def _same_float_dtype(first, *others):
    dtype = first.dtype
    return dtype in _FLOATS and all(other.dtype == dtype for other in others)


def _copy_sources(updates, sources):
    """Write each update's source (``sources[id(weight)]``) into its weight, for in-place updates."""
    if sources:
        for update in updates:
            source = sources.get(id(update[0]))
            if source is not None:
                update[0][...] = source
