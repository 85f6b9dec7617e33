"""Where in the user's code something happened: the first stack frame outside needle and trainers."""
import linecache
import os
import sys

import needle

_FRAMEWORK_DIRS = (
    os.path.dirname(os.path.abspath(needle.__file__)) + os.sep,
    os.path.dirname(os.path.abspath(__file__)) + os.sep,
)


def is_framework_file(filename):
    return filename.startswith(_FRAMEWORK_DIRS) or filename.startswith("<frozen")


def user_frame(depth=1):
    """The innermost frame, ``depth`` levels above the caller or further out, that is user code."""
    frame = sys._getframe(depth + 1)
    while frame is not None and is_framework_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_frame_of(frame):
    """``frame`` or the first frame outside it that is user code (None if none is)."""
    while frame is not None and is_framework_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def user_site(depth=1):
    """``(filename, lineno)`` of the innermost user frame, or None."""
    frame = user_frame(depth + 1)
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None


def describe_site(site):
    """``file.py:LINE: source line`` for a ``(filename, lineno)`` site."""
    filename, lineno = site
    source = linecache.getline(filename, lineno).strip()
    return f"{filename}:{lineno}: {source}" if source else f"{filename}:{lineno}"


def source_of(site):
    return linecache.getline(site[0], site[1]).strip()
