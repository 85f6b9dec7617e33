"""tools/mutate.py: the ``[tool.mutmut]`` table it adds to the scratch copy's pyproject.toml."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def load_tool():
    spec = importlib.util.spec_from_file_location("mutate_tool", ROOT / "tools" / "mutate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_section_mutates_one_file_against_the_chosen_tests_only():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    tool = load_tool()
    text = (ROOT / "pyproject.toml").read_text() + tool.mutmut_section(
        "needle/atomic_file.py", ["tests/trainers/test_atomic.py", "tests/trainers/test_checkpoint.py"]
    )
    config = tomllib.loads(text)["tool"]["mutmut"]
    assert config["only_mutate"] == ["needle/atomic_file.py"]
    assert config["pytest_add_cli_args_test_selection"] == ["tests/trainers/test_atomic.py",
                                                             "tests/trainers/test_checkpoint.py"]
    assert set(config["source_paths"]) == {"needle", "trainers"}
    assert "addopts=" in config["pytest_add_cli_args"]  # no doctests of every module per mutant


def test_the_checkout_itself_has_no_mutmut_table():
    """The table lives only in the scratch copy, so a second run on another file starts clean."""
    assert "[tool.mutmut]" not in (ROOT / "pyproject.toml").read_text()
