"""In a real Jupyter kernel, a leaky cell run again on the same monitor warns again, as fast."""
import nbclient
import nbformat

from test_leak_tour import kernel_for_this_python

TRAP = "sum_loss = 0\nfor i in range(30):\n    x = ndl.Tensor([2.0])\n    sum_loss = sum_loss + x * x\n    monitor.step()"


def test_a_re_run_cell_warns_again_within_a_few_iterations(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    setup = "import needle as ndl\nfrom trainers import MemoryMonitor\nmonitor = MemoryMonitor()"
    # the same source twice: ipykernel names both by one file (a hash of the source), as for a re-run
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in (setup, TRAP, TRAP)])
    nbclient.NotebookClient(notebook, timeout=120, kernel_name=kernel_for_this_python(tmp_path),
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    for cell, run_start in zip(notebook.cells[1:], (0, 30)):
        warning = "".join(output.text for output in cell.outputs if output.get("name") == "stderr")
        assert warning.startswith(f"Cell In[{cell.execution_count}]:4: GraphLeakWarning"), warning
        iteration = int(warning.split("(iteration ")[1].split(",")[0])
        assert iteration - run_start <= 8
        assert warning.count("sum_loss = sum_loss + x * x") == 1
