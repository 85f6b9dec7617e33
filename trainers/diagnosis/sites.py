"""Where in the user's code something happened: the first stack frame outside needle and trainers."""
import importlib.util
import os
import sys

import needle

from .source import line_of



def _package_dir(name):
    """The folder of an installed package, found without importing it; None if it is not installed."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    return os.path.abspath(locations[0]) + os.sep if locations else None


# NOTE: a mutation tool's trampoline (mutmut) runs between needle's callers and the mutated
# function; its frames are no more the user's than needle's are, so tools measure what users see.
_TOOL_DIRS = tuple(folder for folder in map(_package_dir, ("mutmut",)) if folder is not None)
_FRAMEWORK_DIRS = (
    os.path.dirname(os.path.abspath(needle.__file__)) + os.sep,
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,  # trainers/, above diagnosis/
) + _TOOL_DIRS


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
