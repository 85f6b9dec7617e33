"""Load a script from ``examples/`` as a module, the way tests call its functions."""
import importlib.util
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def load_example(name):
    """``examples/<name>.py`` as a fresh module (named ``<name>_example``)."""
    spec = importlib.util.spec_from_file_location(f"{name}_example", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
