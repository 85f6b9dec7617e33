"""Fused routines: the few multi-pass array updates that training repeats every step.

Each device has one set, ``device.fused``. This module's :class:`ArrayRoutines` writes them
with in-place calls of the device's array module through one reused scratch buffer (no
allocation per step); it is what the CPU runs, and what CUDA falls back to for inputs its
kernels do not take. ``fused_cupy.CupyKernels`` runs each routine as one CuPy kernel, because
on a GPU at training sizes every launch costs more than the arithmetic.

The routines take and return the raw arrays of the device's module. The ops and optimizers that
call them own the semantics; the tests hold both sets to the same values.
"""


class ArrayRoutines:
    """The routines as sequences of in-place calls of one array module ``xp``."""

    def __init__(self, xp):
        self.xp = xp
        self._scratch = {}  # dtype -> one flat buffer
        self._scratch_views = {}  # (dtype, shape) -> a view of that buffer

    def scratch_like(self, array):
        """A scratch array shaped like ``array``, carved from one reused buffer per dtype."""
        key = (array.dtype, array.shape)
        view = self._scratch_views.get(key)
        if view is not None:
            return view
        buffer = self._scratch.get(array.dtype)
        if buffer is None or buffer.size < array.size:
            buffer = self._scratch[array.dtype] = self.xp.empty(array.size, dtype=array.dtype)
            self._scratch_views.clear()  # views of the old buffer would keep it alive
        view = self._scratch_views[key] = buffer[: array.size].reshape(array.shape)
        return view

    # ---- optimizer updates (in place) -----------------------------------------------------
    def sgd_step(self, weight, gradient, lr, weight_decay):
        """``weight -= lr * (gradient + weight_decay * weight)``."""
        scratch = self.scratch_like(weight)
        if weight_decay:
            self.xp.multiply(weight, weight_decay, out=scratch)
            scratch += gradient
            scratch *= lr
        else:
            self.xp.multiply(gradient, lr, out=scratch)
        weight -= scratch

    def momentum_step(self, weight, velocity, gradient, momentum, step, weight_decay):
        """``velocity = momentum * velocity + gradient + weight_decay * weight; weight -= step * velocity``."""
        xp = self.xp
        scratch = self.scratch_like(weight)
        velocity *= momentum
        velocity += gradient
        if weight_decay:
            xp.multiply(weight, weight_decay, out=scratch)
            velocity += scratch
        xp.multiply(velocity, step, out=scratch)
        weight -= scratch

    def adam_step(self, weight, first, second, gradient, hyper):
        """One Adam update of ``weight`` and its moments; ``hyper`` is an :class:`AdamScalars`."""
        xp = self.xp
        scratch = self.scratch_like(weight)
        if hyper.weight_decay:
            gradient = gradient + hyper.weight_decay * weight
        first *= hyper.beta1
        xp.multiply(gradient, 1 - hyper.beta1, out=scratch)
        first += scratch
        xp.multiply(gradient, gradient, out=scratch)
        scratch *= 1 - hyper.beta2
        second *= hyper.beta2
        second += scratch
        xp.sqrt(second, out=scratch)
        scratch *= hyper.inverse_sqrt_c2
        scratch += hyper.eps
        xp.divide(first, scratch, out=scratch)
        scratch *= hyper.step_size
        weight -= scratch

    # ---- the same for every parameter of a step (one call per device) -----------------------
    def sgd_steps(self, updates, lr, weight_decay):
        """:meth:`sgd_step` for each ``(weight, gradient)`` in ``updates``."""
        for weight, gradient in updates:
            self.sgd_step(weight, gradient, lr, weight_decay)

    def momentum_steps(self, updates, momentum, step, weight_decay):
        """:meth:`momentum_step` for each ``(weight, velocity, gradient)`` in ``updates``."""
        for weight, velocity, gradient in updates:
            self.momentum_step(weight, velocity, gradient, momentum, step, weight_decay)

    def adam_steps(self, updates, hyper):
        """:meth:`adam_step` for each ``(weight, first, second, gradient)`` in ``updates``."""
        for weight, first, second, gradient in updates:
            self.adam_step(weight, first, second, gradient, hyper)

    # ---- op pieces (new arrays) -----------------------------------------------------------
    def relu_backward(self, out_grad, out):
        """``out_grad`` where ``out > 0``, else 0."""
        # NOTE: a multiply by the mask, not where(): where() branches per element and ran 8x
        # slower on a half-zero mask (175 us against 20 us for a 128 x 512 batch).
        return out_grad * (out > 0)

    def softmax_cross_entropy(self, logits, label_ids):
        """``(mean loss as a 0-d array, saved)``; ``saved`` feeds :meth:`softmax_cross_entropy_gradient`."""
        xp = self.xp
        batch = logits.shape[0]
        shifted = logits - logits.max(axis=1, keepdims=True)
        exp_shifted = xp.exp(shifted)
        totals = exp_shifted.sum(axis=1, keepdims=True)
        rows = xp.arange(batch)
        loss = (xp.log(totals).sum() - shifted[rows, label_ids].sum()) / batch
        return xp.asarray(loss, dtype=logits.dtype), (exp_shifted, totals, rows, label_ids)

    def softmax_cross_entropy_gradient(self, saved, out_grad):
        """``out_grad * (softmax - one_hot) / batch``, made in place in the saved buffer."""
        exp_shifted, totals, rows, label_ids = saved
        scale = out_grad / exp_shifted.shape[0]
        exp_shifted *= scale / totals
        exp_shifted[rows, label_ids] -= scale
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
