"""Sites in a notebook read as IPython's tracebacks name them: ``Cell In[5], line 14``."""
import linecache
import sys
import types

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
