"""Where in the user's code something happened: the first stack frame outside needle and trainers."""
import os
import sys

import needle

from .source import line_of

_FRAMEWORK_DIRS = (
    os.path.dirname(os.path.abspath(needle.__file__)) + os.sep,
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,  # trainers/, above diagnosis/
)


def is_framework_file(filename):
    return filename.startswith(_FRAMEWORK_DIRS) or filename.startswith("<frozen")


def notebook_cell(filename):
    """``"Cell In[5]"`` for the temporary file IPython compiled a cell to (as its tracebacks name
    it), or None outside IPython or for an ordinary file.

    IPython's compiler maps each cell's code name to its execution count
    (``get_ipython().compile.format_code_name``, IPython 8).

    Example:
        >>> notebook_cell("train.py") is None
        True
    """
    IPython = sys.modules.get("IPython")
    shell = IPython.get_ipython() if IPython is not None else None
    format_code_name = getattr(getattr(shell, "compile", None), "format_code_name", None)
    if format_code_name is None:
        return None
    label = format_code_name(filename)
    return f"{label[0]} {label[1]}" if label else None


def describe_site(site):
    """``file.py:LINE: source line`` for a ``(filename, lineno)`` site (``Cell In[5], line 14:
    source line`` for a notebook cell)."""
    filename, lineno = site
    source = line_of(site)
    cell = notebook_cell(filename)
    where = f"{cell}, line {lineno}" if cell else f"{filename}:{lineno}"
    return f"{where}: {source}" if source else where
