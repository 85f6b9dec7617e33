"""Warning categories of the trainers' diagnostics, for filters such as ``-W error::trainers.GraphLeakWarning``."""


class DiagnosticWarning(UserWarning):
    """Base of every warning the memory monitor gives."""


class GraphLeakWarning(DiagnosticWarning):
    """Graph nodes are kept alive across iterations and keep piling up."""


class NoGradWarning(DiagnosticWarning):
    """Iterations build graph nodes that no backward() ever uses (evaluation without no_grad)."""
