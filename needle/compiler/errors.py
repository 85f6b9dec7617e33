"""The error a capture raises when the step cannot be replayed, and the warning of a step that runs eagerly."""


class CaptureError(RuntimeError):
    """Raised while ``ndl.compile`` captures a step that a replay could not reproduce.

    ``where`` is the ``file:line`` of the user's code that caused it, when known.
    """

    def __init__(self, message, where=None):
        super().__init__(message)
        self.where = where


class EagerFallbackWarning(UserWarning):
    """Warned once per signature when ``ndl.compile`` cannot replay a step that ran correctly
    eagerly (on CUDA: a value read to the host inside the step; anywhere: results that need their
    graph, a forward whose backward runs after the call); calls with that signature run eagerly."""


class RecaptureWarning(UserWarning):
    """Warned once per compiled function when it has captured more plans than it keeps: its calls
    keep finding something new (most often a model's tensor attribute replaced between calls, as
    eager training steps replace BatchNorm's running statistics), so most calls capture."""


class EagerFallback(Exception):
    """Raised by a capture whose eager call succeeded but whose step cannot be replayed: carries
    the eager call's result and the reason, for :class:`~needle.compiler.compiled.CompiledFunction`.
    ``keeps_graph``: the results keep their graphs (a forward whose backward the caller runs),
    here and in the eager calls that follow."""

    def __init__(self, reason, eager_result, keeps_graph=False):
        super().__init__(reason)
        self.reason, self.eager_result, self.keeps_graph = reason, eager_result, keeps_graph
