"""Where in the user's code something happened: the first stack frame outside needle and trainers."""
import linecache
import os

import needle

_FRAMEWORK_DIRS = (
    os.path.dirname(os.path.abspath(needle.__file__)) + os.sep,
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,  # trainers/, above diagnosis/
)


def is_framework_file(filename):
    return filename.startswith(_FRAMEWORK_DIRS) or filename.startswith("<frozen")


def describe_site(site):
    """``file.py:LINE: source line`` for a ``(filename, lineno)`` site."""
    filename, lineno = site
    source = linecache.getline(filename, lineno).strip()
    return f"{filename}:{lineno}: {source}" if source else f"{filename}:{lineno}"


def source_of(site):
    return linecache.getline(site[0], site[1]).strip()
