"""Warning categories of the trainers' diagnostics.

Filter them in code (``warnings.simplefilter("error", trainers.GraphLeakWarning)``), or from the
command line with ``NEEDLE_WARNINGS=error`` (below). ``-W error::UserWarning``
also works (DiagnosticWarning is a UserWarning) but turns every library's UserWarning into an
error; ``-W "error:graph leak"`` and ``-W "error:no_grad missing"`` match the messages' first words.

``NEEDLE_WARNINGS``: the command-line switch for every diagnostic warning, read at import.

``python -W error::trainers.GraphLeakWarning`` cannot work: CPython resolves ``-W`` categories
before site-packages can be imported. So ``trainers`` reads an environment variable instead::

    NEEDLE_WARNINGS=error python train.py     # every DiagnosticWarning raises at the user's line
    NEEDLE_WARNINGS=ignore python train.py    # none is shown (the monitor still records)
    NEEDLE_WARNINGS=always python train.py    # every one is shown, repeats included
    NEEDLE_WARNINGS=default python train.py   # Python's default: once per line

It adds one ``warnings.filterwarnings(action, category=DiagnosticWarning)`` at import, ahead of
the filters then in place; a program's own later filters still win. Without the variable no
filter is added.
"""
import os
import threading
import warnings


class DiagnosticWarning(UserWarning):
    """Base of every warning the memory monitor gives."""


class GraphLeakWarning(DiagnosticWarning):
    """Graph nodes are kept alive across iterations and keep piling up."""


class NoGradWarning(DiagnosticWarning):
    """Iterations build graph nodes that no backward() ever uses (evaluation without no_grad)."""


ENVIRONMENT_VARIABLE = "NEEDLE_WARNINGS"
ACTIONS = ("error", "ignore", "always", "default", "once", "module")


def apply_environment(environ=os.environ):
    """Install the filter ``NEEDLE_WARNINGS`` asks for; returns the action, or None when unset.

    Example:
        >>> apply_environment({}) is None
        True
    """
    action = environ.get(ENVIRONMENT_VARIABLE, "").strip().lower()
    if not action:
        return None
    if action not in ACTIONS:
        raise ValueError(
            f"{ENVIRONMENT_VARIABLE}={environ[ENVIRONMENT_VARIABLE]!r} is not a warnings action; use one of "
            f"{', '.join(ACTIONS)} (e.g. {ENVIRONMENT_VARIABLE}=error to turn every leak warning into an error)"
        )
    warnings.filterwarnings(action, category=DiagnosticWarning)
    return action


_SHOWING = threading.RLock()  # one swap of showwarning at a time (re-entrant: a hook may warn)


def warn_at(message, category, filename, lineno):
    """Issue ``message`` as a warning at the user's line, the source line shown once: the message
    quotes it, so Python's own copy after the message is left out.

    Filters, ``warnings.catch_warnings(record=True)``, ``pytest.warns`` and ``NEEDLE_WARNINGS`` see
    the warning as usual (its ``filename`` and ``lineno`` are the user's line).

    Example:
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     warn_at("graph leak: ...", GraphLeakWarning, "train.py", 3)
        >>> caught[0].category.__name__, caught[0].lineno, caught[0].line
        ('GraphLeakWarning', 3, '')
    """
    with _SHOWING:
        show = warnings.showwarning

        def without_source_line(shown, shown_category, shown_file, shown_line, file=None, line=None):
            if shown_category is category and str(shown) == message:
                line = ""  # NOTE: "" (not None) tells Python's formatter not to read the line itself
            show(shown, shown_category, shown_file, shown_line, file, line)

        warnings.showwarning = without_source_line
        try:
            warnings.warn_explicit(message, category, filename, lineno)
        finally:
            warnings.showwarning = show
