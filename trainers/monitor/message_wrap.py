"""Wrap a diagnostic's prose for a notebook, whose output area does not wrap long lines for you."""
import re
import textwrap

_CODE = re.compile(r"`[^`]*`")


def wrap_message(message, width=100):
    """Wrap each line of ``message`` to ``width`` columns, indenting continuations under the
    line's own indent; a `code span` is never split.

    Example:
        >>> print(wrap_message("  Fix: write `total += loss.detach()` instead of the line above", width=30))
          Fix: write
            `total += loss.detach()`
            instead of the line above
    """
    lines = []
    for line in message.splitlines():
        if len(line) <= width:
            lines.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        protected = _CODE.sub(lambda span: span.group(0).replace(" ", "\0"), line.strip())
        wrapped = textwrap.wrap(protected, width=width, initial_indent=indent, subsequent_indent=indent + "  ",
                                break_long_words=False, break_on_hyphens=False)
        lines.extend(part.replace("\0", " ") for part in wrapped)
    return "\n".join(lines)
