"""Warning categories of the trainers' diagnostics.

Filter them in code (``warnings.simplefilter("error", trainers.GraphLeakWarning)``), or from the
command line with ``NEEDLE_WARNINGS=error`` (``trainers.diagnosis.warning_filters``). ``-W error::UserWarning``
also works (DiagnosticWarning is a UserWarning) but turns every library's UserWarning into an
error; ``-W "error:graph leak"`` and ``-W "error:no_grad missing"`` match the messages' first words.
"""


class DiagnosticWarning(UserWarning):
    """Base of every warning the memory monitor gives."""


class GraphLeakWarning(DiagnosticWarning):
    """Graph nodes are kept alive across iterations and keep piling up."""


class NoGradWarning(DiagnosticWarning):
    """Iterations build graph nodes that no backward() ever uses (evaluation without no_grad)."""
