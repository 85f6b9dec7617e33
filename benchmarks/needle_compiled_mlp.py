"""needle, compiled: the benchmark's course loop with its step wrapped in ``ndl.compile``.

The same model, loss, optimizer and DataLoader as ``needle_mlp.NeedleMLP``; the step (reset_grad,
forward, the course's ``loss.backward()``, ``opt.step()``) is captured once per batch shape and
replayed afterwards (see README "Compiled steps").
"""
from needle_mlp import NeedleMLP


class NeedleCompiledMLP(NeedleMLP):
    """784 -> H -> 10 ReLU MLP in needle, its training step compiled with ``ndl.compile``."""

    key = "needle-compiled"
    name = "needle compiled"

    def reset(self, weights):
        super().reset(weights)
        model, loss_fn, opt = self.model, self.loss_fn, self.opt

        def step(x, y):
            opt.reset_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss

        self._compiled_step = self.ndl.compile(step)

    def _step(self, x, y):
        self._compiled_step(x, y)
