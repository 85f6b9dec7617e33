"""Sites in a notebook read as IPython's tracebacks name them: ``Cell In[5], line 14``."""
import linecache
import sys
import types

import pytest

from trainers.diagnosis.sites import describe_site, notebook_cell
from trainers.monitor.message_wrap import wrap_message


def fake_ipython(monkeypatch, cells):
    compiler = types.SimpleNamespace(
        format_code_name=lambda name: ("Cell", f"In[{cells[name]}]") if name in cells else None
    )
    shell = types.SimpleNamespace(compile=compiler)
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))


def test_a_kernels_temporary_file_is_named_as_its_cell(monkeypatch):
    name = "/tmp/ipykernel_15344/3755402841.py"
    fake_ipython(monkeypatch, {name: 5})
    monkeypatch.setitem(linecache.cache, name, (0, None, ["x = 1\n", "total += loss\n"], name))
    assert notebook_cell(name) == "Cell In[5]"
    assert describe_site((name, 2)) == "Cell In[5], line 2: total += loss"
    assert notebook_cell("train.py") is None


def test_outside_ipython_a_site_is_its_file_and_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "IPython", None)
    assert notebook_cell(__file__) is None
    assert describe_site((__file__, 1)).startswith(f"{__file__}:1: ")


def test_wrapping_keeps_code_spans_whole_and_short_lines_alone():
    fix = "  Fix: accumulate a detached value: `total_loss += loss.detach()` (or a Python number: `float(loss.numpy())`)"
    wrapped = wrap_message("head\n" + fix, width=60).splitlines()
    assert wrapped[0] == "head"
    assert all(len(line) <= 60 for line in wrapped)
    assert "`total_loss += loss.detach()`" in "\n".join(wrapped)
    assert all(line.startswith("    ") for line in wrapped[2:])


def test_framework_files_are_needles_the_trainers_and_pythons_frozen_modules():
    import needle
    import trainers
    from trainers.diagnosis.sites import is_framework_file

    assert is_framework_file(needle.autograd.__file__)
    assert is_framework_file(trainers.__file__)
    assert is_framework_file("<frozen runpy>") and is_framework_file("<frozen importlib._bootstrap>")
    assert not is_framework_file(__file__)
    assert not is_framework_file("train.py") and not is_framework_file("<stdin>")


def test_a_site_without_a_source_line_is_its_file_and_line_alone(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("x = 1\n\n")
    assert describe_site((str(script), 1)) == f"{script}:1: x = 1"
    assert describe_site((str(script), 2)) == f"{script}:2"
    assert describe_site((str(script), 40)) == f"{script}:40"


def test_an_installed_packages_folder_is_found_without_importing_it():
    import json
    import os

    from trainers.diagnosis.sites import _package_dir

    assert _package_dir("json") == os.path.dirname(os.path.abspath(json.__file__)) + os.sep
    assert _package_dir("os") is None, "a plain module has no folder of its own"
    assert _package_dir("no_such_package_here") is None
    assert _package_dir("") is None, "an empty name is refused by importlib: no folder"


def test_a_mutation_tools_frames_are_not_the_users():
    import os

    from trainers.diagnosis.sites import _package_dir, is_framework_file

    folder = _package_dir("mutmut")
    if folder is None:
        pytest.skip("mutmut is not installed (the mutation extra)")
    assert is_framework_file(os.path.join(folder, "mutation", "trampoline.py"))
    assert not is_framework_file(os.path.join(os.path.dirname(folder.rstrip(os.sep)), "mutmut_notes.py"))
