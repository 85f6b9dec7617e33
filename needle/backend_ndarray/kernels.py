"""Device kernels: the few multi-pass array routines that training repeats every step.

Each device has one set, ``device.kernels`` (optimizer updates, softmax cross-entropy and its
gradient, ReLU's backward). This module's :class:`ArrayRoutines` writes them
with in-place calls of the device's array module; it is what the CPU runs, and what CUDA falls
back to for inputs its kernels do not take. ``kernels_cupy.CupyKernels`` runs each routine as one
CuPy kernel, because on a GPU at training sizes every launch costs more than the arithmetic.

The routines hold no mutable state of their own: the optimizer updates take the caller's
:class:`Scratch` (each optimizer owns one), so two models trained in two threads never share a
buffer. The routines take and return the raw arrays of the device's module. The ops and
optimizers that call them own the semantics; the tests hold both sets to the same values.
"""
import numpy

from . import fused_ops, fused_updates

# The most elements the SGD updates' scratch holds when they run as numpy calls (with or without
# momentum; plain SGD with weight decay and Adam take a whole-size one): a larger weight is
# updated in pieces of this size (128 KiB of float32), see ArrayRoutines._combine_scaled. With
# the C extension built (fused_updates.py) the updates take no scratch at all.
SCRATCH_PIECE = 32768


class Scratch:
    """Reusable scratch arrays for one owner (an optimizer): one flat buffer per array type and dtype.

    An update asks for an array shaped like the parameter it updates and is done with it before
    the next parameter's update, so one buffer, as large as the largest parameter, serves all.
    Not shared: an optimizer makes its own, so optimizers stepping in different threads never
    write each other's scratch.

    Example:
        >>> import numpy as np
        >>> scratch = Scratch()
        >>> scratch.like(np, np.zeros((2, 3), np.float32)).shape
        (2, 3)
    """

    __slots__ = ("_buffers", "_views")

    def __init__(self):
        self._buffers = {}  # (array type, dtype) -> one flat buffer
        self._views = {}  # (array type, dtype, shape) -> a view of that buffer

    def like(self, xp, array):
        """A scratch array of ``xp`` (numpy or CuPy) shaped like ``array``; its values are garbage."""
        key = (array.__class__, array.dtype, array.shape)
        view = self._views.get(key)
        if view is not None:
            return view
        buffer_key = key[:2]
        buffer = self._buffers.get(buffer_key)
        if buffer is None or buffer.size < array.size:
            buffer = self._buffers[buffer_key] = xp.empty(array.size, dtype=array.dtype)
            self._views = {k: v for k, v in self._views.items() if k[:2] != buffer_key}  # views of the old buffer
        view = self._views[key] = buffer[: array.size].reshape(array.shape)
        return view


class SoftmaxCrossEntropySaved:
    """What a softmax cross-entropy forward keeps for its gradient (both routine sets use it alike).

    Attributes:
        exp_shifted: ``exp(logits - row max)``, C-contiguous (batch, classes); the gradient is
            made from it in place, so the state is used up by one gradient.
        totals: the row sums of ``exp_shifted``, shape (batch,).
        label_ids: the integer labels, shape (batch,).
    """

    __slots__ = ("exp_shifted", "totals", "label_ids")

    def __init__(self, exp_shifted, totals, label_ids):
        self.exp_shifted = exp_shifted
        self.totals = totals
        self.label_ids = label_ids


class ArrayRoutines:
    """The routines as sequences of in-place calls of one array module ``xp``."""

    def __init__(self, xp):
        self.xp = xp
        # NOTE: numpy arrays only (CuPy's export no host buffer); None when the C extension is
        # not built or is turned off, and the updates are the numpy calls below.
        on_host = xp.__name__ == "numpy"
        self._fused_momentum_step = fused_updates.momentum_step if on_host else None
        self._fused_sgd_step = fused_updates.sgd_step if on_host else None
        self._fused_adam_step = fused_updates.adam_step if on_host else None
        # The same for the loss's and ReLU's pieces (fused_ops.py); they run through fused_ops.run.
        self._fused_shift_rows = fused_ops.shift_rows if on_host else None
        self._fused_take_labels = fused_ops.take_labels if on_host else None
        self._fused_cross_entropy_gradient = fused_ops.cross_entropy_gradient if on_host else None
        self._fused_relu_backward = fused_ops.relu_backward if on_host else None

    # ---- optimizer updates (in place, or from ``sources``), every parameter of one step in one call
    @property
    def updates_out_of_place(self) -> bool:
        """Whether the updates below read a weight's old values from a ``sources`` buffer and
        write the new ones into the weight at no extra cost (needle.weight_handover): the fused
        kernels on the CPU."""
        return self._fused_momentum_step is not None

    def sgd_steps(self, updates, lr, weight_decay, scratch, sources=None):
        """``weight -= lr * (gradient + weight_decay * weight)`` for each ``(weight, gradient)``.

        ``sources``: ``{id(weight): array}`` for weights whose old values are read from that
        array instead (an update out of place; the same in momentum_steps and adam_steps).
        """
        xp, fused = self.xp, self._fused_sgd_step
        for weight, gradient in updates:
            source = sources.get(id(weight)) if sources else None
            if fused is not None and fused(weight, gradient, lr, weight_decay, source):
                continue  # one pass, the values of the numpy calls below
            if source is not None:
                weight[...] = source
            if not weight_decay:
                self._combine_scaled(xp.subtract, weight, gradient, lr, scratch)
                continue
            buffer = scratch.like(xp, weight)
            xp.multiply(weight, weight_decay, out=buffer)
            buffer += gradient
            buffer *= lr
            weight -= buffer

    def momentum_steps(self, updates, momentum, step, weight_decay, scratch, sources=None):
        """For each ``(weight, velocity, gradient)``:
        ``velocity = momentum * velocity + gradient + weight_decay * weight; weight -= step * velocity``."""
        combine, fused = self._combine_scaled, self._fused_momentum_step
        for weight, velocity, gradient in updates:
            source = sources.get(id(weight)) if sources else None
            if fused is not None and fused(weight, velocity, gradient, momentum, step, weight_decay, source):
                continue  # one pass, the values of the numpy calls below
            if source is not None:
                weight[...] = source
            velocity *= momentum
            velocity += gradient
            if weight_decay:
                combine(self.xp.add, velocity, weight, weight_decay, scratch)
            combine(self.xp.subtract, weight, velocity, step, scratch)

    def _combine_scaled(self, operation, target, source, factor, scratch):
        """``target = operation(target, source * factor)`` in place (``operation`` is ``xp.add``
        or ``xp.subtract``), the product rounded on its own as ``target -= source * factor`` rounds it.

        A large array goes through in pieces of at most ``SCRATCH_PIECE`` elements, so the
        scratch stays a small buffer that the core's cache keeps: a scratch as large as the
        weight is one more weight-sized array a step streams through, and at the benchmark's
        H=128 it pushed the weights, velocities and gradients (three 400 KB arrays) out of a
        2 MB L2 cache (docs/benchmarks.md, "The update's scratch, in pieces"). The arithmetic
        is elementwise, so the values do not depend on the pieces.
        """
        xp, size = self.xp, target.size
        if size <= SCRATCH_PIECE or source.shape != target.shape or not (
            target.flags.c_contiguous and source.flags.c_contiguous
        ):
            buffer = scratch.like(xp, target)
            xp.multiply(source, factor, out=buffer)
            operation(target, buffer, out=target)
            return
        target, source = target.reshape(-1), source.reshape(-1)
        piece, multiply = scratch.like(xp, target[:SCRATCH_PIECE]), xp.multiply
        for start in range(0, size, SCRATCH_PIECE):
            stop = start + SCRATCH_PIECE
            part = target[start:stop]
            buffer = piece if stop <= size else piece[: size - start]
            multiply(source[start:stop], factor, out=buffer)
            operation(part, buffer, out=part)

    def adam_steps(self, updates, hyper, scratch, sources=None):
        """One Adam update of each ``(weight, first, second, gradient)``; ``hyper`` is an :class:`AdamScalars`."""
        xp, fused = self.xp, self._fused_adam_step
        for weight, first, second, gradient in updates:
            source = sources.get(id(weight)) if sources else None
            if fused is not None and fused(
                weight, first, second, gradient, hyper.beta1, 1 - hyper.beta1, hyper.beta2, 1 - hyper.beta2,
                hyper.inverse_sqrt_c2, hyper.eps, hyper.step_size, hyper.weight_decay, source,
            ):
                continue  # one pass, the values of the numpy calls below
            if source is not None:
                weight[...] = source
            buffer = scratch.like(xp, weight)
            if hyper.weight_decay:
                gradient = gradient + hyper.weight_decay * weight
            first *= hyper.beta1
            xp.multiply(gradient, 1 - hyper.beta1, out=buffer)
            first += buffer
            xp.multiply(gradient, gradient, out=buffer)
            buffer *= 1 - hyper.beta2
            second *= hyper.beta2
            second += buffer
            xp.sqrt(second, out=buffer)
            buffer *= hyper.inverse_sqrt_c2
            buffer += hyper.eps
            xp.divide(first, buffer, out=buffer)
            buffer *= hyper.step_size
            weight -= buffer

    # ---- op pieces (new arrays) -----------------------------------------------------------
    def relu_backward(self, out_grad, out):
        """``out_grad`` where ``out > 0``, else 0."""
        fused = self._fused_relu_backward
        if fused is not None and out_grad.shape == out.shape:
            done = fused_ops.run(fused, True, numpy.empty(out.shape, out.dtype), out_grad, out)
            if done is not None:
                return done[0]  # one pass, the values of the numpy calls below
        # NOTE: a multiply by the mask, not where(): where() branches per element and ran 8x
        # slower on a half-zero mask (175 us against 20 us for a 128 x 512 batch).
        return out_grad * (out > 0)

    def softmax_cross_entropy(self, logits, label_ids):
        """``(mean loss as a 0-d array, saved)``; ``saved``, a :class:`SoftmaxCrossEntropySaved`,
        feeds :meth:`softmax_cross_entropy_gradient`."""
        xp, run = self.xp, fused_ops.run
        batch = logits.shape[0]
        shift, take = self._fused_shift_rows, self._fused_take_labels
        done = None if shift is None else run(shift, True, numpy.empty(logits.shape, logits.dtype), logits)
        shifted = done[0] if done is not None else logits - logits.max(axis=1, keepdims=True)
        exp_shifted = xp.exp(shifted)
        totals = exp_shifted.sum(axis=1)
        # NOTE: the label gather bounds-checks every id (IndexError): the op relies on it for
        # small unsigned labels (the C kernel refuses an id out of range, and the gather then
        # raises). One sum of the per-row losses, not two sums subtracted.
        row_losses = xp.log(totals)
        if take is None or run(take, False, row_losses, shifted, label_ids) is None:
            row_losses -= shifted[xp.arange(batch), label_ids]
        loss = row_losses.sum() / batch
        return xp.asanyarray(loss, dtype=logits.dtype), SoftmaxCrossEntropySaved(exp_shifted, totals, label_ids)

    def softmax_cross_entropy_gradient(self, saved, out_grad):
        """``out_grad * (softmax - one_hot) / batch``, made in place in ``saved.exp_shifted``."""
        exp_shifted = saved.exp_shifted
        batch = exp_shifted.shape[0]
        scale = out_grad / batch
        fused = self._fused_cross_entropy_gradient
        if fused is not None and fused_ops.run(fused, False, exp_shifted, saved.totals, saved.label_ids, scale) is not None:
            return exp_shifted  # one pass, the values of the numpy calls below
        exp_shifted *= scale / saved.totals.reshape(batch, 1)
        exp_shifted[self.xp.arange(batch), saved.label_ids] -= scale
        return exp_shifted


class AdamScalars:
    """The per-step scalars of one Adam update, with the bias corrections folded in.

    ``m_hat / (sqrt(v_hat) + eps) == (m / c1) / (sqrt(v) / sqrt(c2) + eps)`` with
    ``c1 = 1 - beta1**t`` and ``c2 = 1 - beta2**t``, so a step needs only ``step_size = lr / c1``
    and ``inverse_sqrt_c2 = 1 / sqrt(c2)``.
    """

    __slots__ = ("beta1", "beta2", "eps", "weight_decay", "step_size", "inverse_sqrt_c2")

    def __init__(self, beta1, beta2, eps, weight_decay, step_size, inverse_sqrt_c2):
        self.beta1 = beta1
        self.beta2 = beta2
        self.eps = eps
        self.weight_decay = weight_decay
        self.step_size = step_size
        self.inverse_sqrt_c2 = inverse_sqrt_c2

    def as_tuple(self):
        """The scalars in the order the CUDA kernels take them (``cuda_kernels.ADAM_SCALARS``)."""
        return (self.beta1, self.beta2, self.eps, self.weight_decay, self.step_size, self.inverse_sqrt_c2)
