"""examples/leak_tour.ipynb runs in a real Jupyter kernel (nbclient) and its outputs read right."""
import json
import os
import sys
from pathlib import Path

import nbclient
import nbformat

REPOSITORY = Path(__file__).resolve().parents[2]
NOTEBOOK = REPOSITORY / "examples" / "leak_tour.ipynb"


def kernel_for_this_python(folder):
    """A kernelspec that starts ipykernel on this interpreter with this checkout importable."""
    spec = folder / "kernels" / "needle-tests"
    spec.mkdir(parents=True)
    path = os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")]))
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "needle tests", "language": "python", "env": {"PYTHONPATH": path},
    }))
    return "needle-tests"


def executed(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # anything the notebook writes lands here
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=120, kernel_name=kernel_for_this_python(tmp_path),
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def cell_with(cells, text):
    (cell,) = [cell for cell in cells if text in cell.source]
    return cell


def stderr_of(cell):
    return "".join(output.text for output in cell.outputs if output.get("name") == "stderr")


def test_the_tour_runs_and_its_outputs_read_right(tmp_path, monkeypatch):
    cells = executed(tmp_path, monkeypatch)
    outputs = [output for cell in cells for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]

    trap = cell_with(cells, "sum_loss = sum_loss + x * x")
    warning = stderr_of(trap)
    assert "GraphLeakWarning: graph leak" in warning
    line = trap.source.splitlines().index("    sum_loss = sum_loss + x * x") + 1
    assert warning.startswith(f"Cell In[{trap.execution_count}]:{line}: GraphLeakWarning")
    assert f"Cell In[{trap.execution_count}], line {line}: sum_loss = sum_loss + x * x" in warning
    assert "ipykernel_" not in warning  # the cell, not the kernel's temporary file
    assert warning.count("sum_loss = sum_loss + x * x") == 1  # the source line once
    assert max(len(line) for line in warning.splitlines()) <= 140  # wrapped prose

    explained = cell_with(cells, "monitor.explain()")
    (result,) = explained.outputs
    assert result.output_type == "execute_result" and result.data["text/html"].startswith("<pre")
    assert "leak (accumulation) at Cell In[" in result.data["text/plain"]
    assert not [output for output in explained.outputs if output.output_type == "stream"]  # shown once

    fixed = cell_with(cells, ".detach()")
    assert stderr_of(fixed) == ""

    training = cell_with(cells, "trainer.fit(")
    note = stderr_of(training)  # the graphs earlier cells keep (v4, dx, ...) are noted, named, once
    assert note.count("graph nodes were alive before training started: kept by earlier code, e.g. `") == 1
    assert "%|" not in note  # no leftover text bars in a saved notebook
    bars = [output.data["text/plain"] for output in training.outputs if output.output_type == "display_data"]
    assert len(bars) == 4 and all("100%" in bar and "nodes=" in bar and "mem=" in bar for bar in bars)

    plot = cell_with(cells, "trainer.plot()")
    images = [output for output in plot.outputs if "image/png" in output.get("data", {})]
    assert len(images) == 1


PROGRESS_WITHOUT_WIDGETS = """\
import sys
sys.modules["ipywidgets"] = None  # as in a kernel without ipywidgets
import numpy as np, needle as ndl
from needle.data import DataLoader, NDArrayDataset
from trainers import Trainer
X = np.random.default_rng(0).standard_normal((64, 2)).astype(np.float32)
loader = DataLoader(NDArrayDataset(X, (X[:, 0] > 0).astype(np.uint8)), batch_size=8)
model = ndl.nn.Linear(2, 2)
Trainer(model, ndl.optim.SGD(model.parameters(), lr=0.1), monitor=False).fit(loader, epochs=2);
"""


def test_progress_without_ipywidgets_is_one_text_display_per_epoch(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PROGRESS_WITHOUT_WIDGETS)])
    nbclient.NotebookClient(notebook, timeout=120, kernel_name=kernel_for_this_python(tmp_path),
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    (cell,) = notebook.cells
    assert [output.output_type for output in cell.outputs] == ["display_data", "display_data"]
    for epoch, output in enumerate(cell.outputs, start=1):
        assert list(output.data) == ["text/plain"]  # text, no widget
        assert output.data["text/plain"].startswith(f"epoch {epoch}: 100%|") and "nodes=" in output.data["text/plain"]
