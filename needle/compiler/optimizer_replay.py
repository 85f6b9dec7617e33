"""An optimizer step as a replay runs it: the update's arrays resolved once, its scalars read now.

A replay's optimizer step touches the same arrays every time (the plan's gradient buffers, the
parameters, the optimizer's state), so :class:`ReplayedStep` looks them up once, after a full
``opt.step()``, and later replays only check by identity that nothing was replaced before they
call the device kernels' update with the hyper-parameters read from the optimizer at that moment
(``opt.lr = x`` takes effect; Adam's ``t`` advances as in ``Adam.step``). The arithmetic is the
kernel that ``step()`` calls, so results stay bitwise equal. Anything replaced (a loaded
state dict, a new momentum, a parameter given no gradient) makes that call a full ``opt.step()``.
"""
from .flat_buffers import flat_state, same_layout
from .state import restore_arrays


class ReplayedStep:
    """Run ``opt``'s step at a replay, through the resolved fast path when it still applies.

    Example:
        >>> import needle as ndl
        >>> w = ndl.nn.Parameter(ndl.Tensor([1.0, 2.0]))
        >>> opt = ndl.optim.SGD([w], lr=0.5, momentum=0.5)
        >>> step = ReplayedStep(opt)
        >>> w.grad = ndl.Tensor([1.0, 1.0])
        >>> step(); step(); w.numpy().tolist()   # the first call is a full step, the second resolved
        [0.375, 1.375]
        >>> step.fast is not None
        True
    """

    __slots__ = ("opt", "full_step", "fast")

    def __init__(self, opt):
        self.opt = opt
        self.full_step = step_keeping_arrays(opt)
        self.fast = None

    def __call__(self):
        fast = self.fast
        if fast is not None and fast():
            return
        self.full_step()
        self.fast = _resolve(self.opt)


def step_keeping_arrays(opt):
    """``opt``'s own step, after which each parameter still holds the array it held before: a step
    that gives parameters new arrays (``p.data = p.data - lr * p.grad``, as course-written
    optimizers do) has the new values copied into the old ones, which a plan's steps read
    (:func:`~needle.compiler.state.restore_arrays`)."""
    step = type(opt).step.__get__(opt)
    params = opt.params

    def step_in_place():
        before = [(param, param.cached_data) for param in params]
        step()
        restore_arrays(before)

    return step_in_place


def _resolve(opt):
    """The fast path for ``opt`` as it is now, or None for an optimizer without one."""
    from ..optim.adam import Adam
    from ..optim.sgd import SGD

    kind = type(opt)
    if kind is not SGD and kind is not Adam:
        return None  # a subclass may change step(): it always runs in full
    params = opt.params
    entries, groups = [], {}
    for param in params:
        grad = param.grad
        if grad is None or grad.cached_data is None or param.cached_data is None:
            entries.append((param, grad, None, None, None, None))
            if grad is not None:
                return None
            continue
        gradient_data, weight_data = grad.cached_data, param.cached_data
        entries.append((param, grad, gradient_data, gradient_data.raw, weight_data, weight_data.raw))
        groups.setdefault(weight_data.device.kernels, []).append(param)
    entries = tuple(entries)

    def unchanged():
        if opt.params is not params or len(params) != len(entries):
            return False
        for param, grad, gradient_data, gradient, weight_data, weight in entries:
            if param.grad is not grad:
                return False
            if gradient_data is not None and (
                grad.cached_data is not gradient_data or gradient_data.raw is not gradient
                or param.cached_data is not weight_data or weight_data.raw is not weight
            ):
                return False
        return True

    raw = {id(entry[0]): (entry[5], entry[3]) for entry in entries if entry[2] is not None}
    if kind is SGD:
        return _sgd_path(opt, unchanged, groups, raw)
    return _adam_path(opt, unchanged, groups, raw)


def _sgd_path(opt, unchanged, groups, raw):
    momentum_at_build = float(opt.momentum)
    scaled = opt.u.scaled
    if momentum_at_build:
        velocities = {id(p): scaled.get(p) for ps in groups.values() for p in ps}
        if any(v is None for v in velocities.values()):
            return None
        updates = []
        for kernels, ps in groups.items():
            flat = _flat_update(ps, raw, (scaled,))
            if flat is not None:
                weight, gradient, (velocity,) = flat
                updates.append((kernels, [(weight, velocity, gradient)]))
                velocities.update((id(p), scaled[p]) for p in ps)
            else:
                updates.append((kernels, [(raw[id(p)][0], velocities[id(p)], raw[id(p)][1]) for p in ps]))
        owned = [(p, velocities[id(p)]) for ps in groups.values() for p in ps]
    else:
        updates = []
        for kernels, ps in groups.items():
            flat = _flat_update(ps, raw, ())
            updates.append((kernels, [flat[:2]] if flat is not None else [raw[id(p)] for p in ps]))
        owned = []
    scratch = opt._scratch

    def fast():
        lr, momentum, weight_decay = float(opt.lr), float(opt.momentum), float(opt.weight_decay)
        if (momentum == 0) != (momentum_at_build == 0) or not unchanged():
            return False
        if momentum:
            velocities_now = opt.u
            if velocities_now.momentum != momentum or velocities_now.scaled is not scaled:
                return False
            for param, velocity in owned:
                if scaled.get(param) is not velocity:
                    return False
            step = lr * (1 - momentum)
            for kernels, device_updates in updates:
                kernels.momentum_steps(device_updates, momentum, step, weight_decay, scratch)
        else:
            for kernels, device_updates in updates:
                kernels.sgd_steps(device_updates, lr, weight_decay, scratch)
        return True

    return fast


def _adam_path(opt, unchanged, groups, raw):
    firsts, seconds = opt.m, opt.v
    owned, updates = [], []
    for kernels, ps in groups.items():
        if any(firsts.get(p) is None or seconds.get(p) is None for p in ps):
            return None
        flat = _flat_update(ps, raw, (firsts, seconds))
        if flat is not None:
            weight, gradient, (first, second) = flat
            updates.append((kernels, [(weight, first, second, gradient)]))
        device_updates = []
        for p in ps:
            first, second = firsts.get(p), seconds.get(p)
            owned.append((p, first, second))
            device_updates.append((raw[id(p)][0], first, second, raw[id(p)][1]))
        if flat is None:
            updates.append((kernels, device_updates))
    scratch = opt._scratch

    def fast():
        if opt.m is not firsts or opt.v is not seconds or not unchanged():
            return False
        for param, first, second in owned:
            if firsts.get(param) is not first or seconds.get(param) is not second:
                return False
        hyper = opt._next_step_scalars()
        for kernels, device_updates in updates:
            kernels.adam_steps(device_updates, hyper, scratch)
        return True

    return fast


def _flat_update(params, raw, states):
    """``(weights, gradients, state buffers)``, all flat, when the parameters' weights and
    gradients tile two flat buffers alike (see :mod:`needle.compiler.flat_buffers`); each state
    dict (param -> array) then has its arrays moved into one flat buffer of that layout, its
    entries becoming views of it. None (nothing moved) otherwise."""
    layout = same_layout([raw[id(p)][0] for p in params], [raw[id(p)][1] for p in params])
    if layout is None:
        return None
    weight_buffer, gradient_buffer, offsets = layout
    moved = []
    for state in states:
        arrays = [state.get(p) for p in params]
        if any(a is None for a in arrays):
            return None
        flat = flat_state(weight_buffer, offsets, arrays)
        if flat is None:
            return None
        moved.append(flat)
    buffers = []
    for state, (buffer, views) in zip(states, moved):
        for p, view in zip(params, views):
            state[p] = view
        buffers.append(buffer)
    return weight_buffer, gradient_buffer, tuple(buffers)
