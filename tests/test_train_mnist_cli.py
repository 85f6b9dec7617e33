"""The main job's command line: --device cuda failures name the fix; argument errors are clear."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_mnist.py"

RUN_WITHOUT_CUPY = (
    "import runpy, sys; sys.modules['cupy'] = None; "  # `import cupy` fails as when it is not installed
    f"sys.argv = [{str(EXAMPLE)!r}, '--device', 'cuda']; runpy.run_path(sys.argv[0], run_name='__main__')"
)

FAKE_CUPY_WITHOUT_DRIVER = '''
class _Runtime:
    @staticmethod
    def getDeviceCount():
        raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version")


class cuda:
    runtime = _Runtime
'''


def run(arguments, tmp_path, extra_path=None):
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, *arguments], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)


def test_cuda_without_cupy_names_the_cli_fix(tmp_path):
    result = run(["-c", RUN_WITHOUT_CUPY], tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "--device cuda needs CuPy, which is not installed" in result.stderr
    assert "--device cpu" in result.stderr and "pip install 'needle-dl[cuda]'" in result.stderr


def test_cuda_with_cupy_but_no_driver_says_exactly_that(tmp_path):
    (tmp_path / "fake" / "cupy").mkdir(parents=True)
    (tmp_path / "fake" / "cupy" / "__init__.py").write_text(FAKE_CUPY_WITHOUT_DRIVER)
    result = run([str(EXAMPLE), "--device", "cuda"], tmp_path, extra_path=tmp_path / "fake")
    assert result.returncode == 2
    assert "CuPy is installed, but it finds no usable GPU or driver" in result.stderr
    assert "cudaErrorInsufficientDriver" in result.stderr and "nvidia-smi" in result.stderr
    assert "not installed" not in result.stderr and "--device cpu" in result.stderr


def test_cuda_with_a_broken_cupy_install_says_it_cannot_be_imported(tmp_path):
    (tmp_path / "fake" / "cupy").mkdir(parents=True)
    (tmp_path / "fake" / "cupy" / "__init__.py").write_text(
        'raise ImportError("libcudart.so.12: cannot open shared object file")\n'
    )
    result = run([str(EXAMPLE), "--device", "cuda"], tmp_path, extra_path=tmp_path / "fake")
    assert result.returncode == 2
    assert "CuPy is installed, but it cannot be imported" in result.stderr
    assert "libcudart.so.12" in result.stderr


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--resume"], "--resume needs --checkpoint PATH"),
        (["--resume", "--checkpoint", "missing.npz"], "--resume: no checkpoint at missing.npz"),
    ],
)
def test_resume_errors(tmp_path, arguments, message):
    result = run([str(EXAMPLE), *arguments], tmp_path)
    assert result.returncode == 2 and message in result.stderr
