"""The one reader of the user's source: the line at a site, and the statement written on it.

A site is ``(filename, lineno)``. Every diagnostic that quotes or rewrites the user's line reads it
here (through ``linecache``, so a notebook cell's source is found as IPython registered it).

Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "loop.py")
    >>> with open(path, "w") as handle:
    ...     _ = handle.write("h, c = cell(x, (h, c))\\n")
    >>> line_of((path, 1)), sorted(assigned_names((path, 1))), assigned_targets((path, 1))
    ('h, c = cell(x, (h, c))', ['c', 'h'], ['(h, c)'])
"""
import ast
import linecache


def line_of(site):
    """The source line at ``site``, stripped; ``""`` where it cannot be read."""
    return linecache.getline(site[0], site[1]).strip()


def lines_of_file(filename):
    """Every line of ``filename`` (a script's whole loop), or [] where it cannot be read."""
    return linecache.getlines(filename)


def parse_statement(text):
    """``(statement, segment)`` for source text holding exactly one statement, else ``(None, None)``;
    ``segment(node)`` is the user's own spelling of a part of it."""
    text = text.strip()
    try:
        tree = ast.parse(text)
    except SyntaxError:  # a statement over several lines: callers fall back to general words
        return None, None
    if len(tree.body) != 1:
        return None, None
    return tree.body[0], (lambda node: ast.get_source_segment(text, node) or ast.unparse(node))


def statement_at(site):
    """The (first) statement written on the line at ``site``, as an ``ast`` node; None where the line
    is unknown or holds no whole statement."""
    if site is None:
        return None
    try:
        body = ast.parse(line_of(site)).body
    except (SyntaxError, ValueError):
        return None
    return body[0] if body else None


def assigned_targets(site):
    """The source of a line's assignment targets (``["self.h"]``), or [] for other statements."""
    statement = statement_at(site)
    return [ast.unparse(t) for t in statement.targets] if isinstance(statement, ast.Assign) else []


def assigned_names(site):
    """The plain names a line's assignment binds (``h`` in ``h = cell(x, h)``, ``h, c`` in ``h, c = ...``)."""
    statement = statement_at(site)
    targets = statement.targets if isinstance(statement, ast.Assign) else []
    return {node.id for target in targets for node in ast.walk(target) if isinstance(node, ast.Name)}
