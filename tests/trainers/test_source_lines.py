"""trainers.diagnosis.source on its own: the line at a site, and the statement written on it."""
import ast
import linecache

import pytest

from trainers.diagnosis.source import (
    assigned_names,
    assigned_targets,
    line_of,
    lines_of_file,
    parse_statement,
    statement_at,
)


@pytest.fixture
def script(tmp_path):
    """A file of the given lines; yields a function making the site of its line ``n`` (from 1)."""
    path = tmp_path / "loop.py"

    def write(*lines):
        path.write_text("".join(line + "\n" for line in lines))
        linecache.checkcache(str(path))
        return lambda n: (str(path), n)

    yield write
    linecache.checkcache(str(path))


def test_line_of_strips_the_line_and_is_empty_where_unreadable(script):
    site = script("x = 1", "    total = total + loss   ")
    assert line_of(site(1)) == "x = 1"
    assert line_of(site(2)) == "total = total + loss"
    assert line_of(site(3)) == ""  # past the end
    assert line_of(("/no/such/file.py", 1)) == ""


def test_lines_of_file_are_every_line_as_written(script):
    site = script("for x in data:", "    kept.append(x)")
    assert lines_of_file(site(1)[0]) == ["for x in data:\n", "    kept.append(x)\n"]
    assert lines_of_file("/no/such/file.py") == []


def test_parse_statement_gives_the_one_statement_and_the_users_spelling():
    statement, segment = parse_statement("  losses.append( loss )  ")
    assert isinstance(statement, ast.Expr)
    assert segment(statement.value.args[0]) == "loss"
    assert segment(statement.value) == "losses.append( loss )"  # the user's spacing, not ast.unparse's


def test_parse_statement_falls_back_to_unparse_for_a_node_not_in_the_text():
    statement, segment = parse_statement("h = cell(x, h)")
    made = ast.Name(id="state", ctx=ast.Load())  # no position in the text
    assert segment(made) == "state"
    assert segment(statement.targets[0]) == "h"


@pytest.mark.parametrize("text", ["for x in data:", "a = 1; b = 2", "", "x = (1,"])
def test_parse_statement_refuses_anything_but_exactly_one_whole_statement(text):
    assert parse_statement(text) == (None, None)


def test_statement_at_is_the_first_statement_or_none(script):
    site = script("a = f(x); b = 2", "for x in data:", "", "# a comment", "h = cell(x, h)")
    first = statement_at(site(1))
    assert isinstance(first, ast.Assign) and ast.unparse(first) == "a = f(x)"
    assert statement_at(site(2)) is None  # not a whole statement
    assert statement_at(site(3)) is None  # an empty line has no body
    assert statement_at(site(4)) is None
    assert ast.unparse(statement_at(site(5))) == "h = cell(x, h)"
    assert statement_at(None) is None


def test_statement_at_a_line_with_a_null_byte_is_none(script):
    site = script("x = '\0'")  # ast.parse raises ValueError (or SyntaxError) for a null byte
    assert statement_at(site(1)) is None


def test_assigned_targets_are_the_sources_of_every_target(script):
    site = script("self.h = cell(x, self.h)", "a = b = loss", "h, c = cell(x, (h, c))", "total += loss",
                  "print(x)", "for x in data:")
    assert assigned_targets(site(1)) == ["self.h"]
    assert assigned_targets(site(2)) == ["a", "b"]
    assert assigned_targets(site(3)) == ["(h, c)"]
    assert assigned_targets(site(4)) == []  # an augmented assignment is not an Assign
    assert assigned_targets(site(5)) == []
    assert assigned_targets(site(6)) == []


def test_assigned_names_are_the_plain_names_bound(script):
    site = script("h, (c, d) = cell(x, (h, c))", "a = b = loss", "self.h = cell(x, self.h)",
                  "total += loss", "for x in data:")
    assert assigned_names(site(1)) == {"h", "c", "d"}
    assert assigned_names(site(2)) == {"a", "b"}
    assert assigned_names(site(3)) == {"self"}  # the attribute's owner is the only Name in the target
    assert assigned_names(site(4)) == set()
    assert assigned_names(site(5)) == set()
