"""The main job's command line: --device cuda failures name the fix; argument errors are clear."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from example_scripts import load_example

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


# ---- arguments are refused before any training (issue 18.8) ----------------------------------
@pytest.mark.parametrize(
    "arguments, words",
    [
        (["--epochs", "0"], "--epochs: must be a whole number >= 1"),
        (["--epochs", "-1"], "--epochs: must be a whole number >= 1"),
        (["--hidden", "0"], "--hidden: must be a whole number >= 1"),
        (["--batch-size", "0"], "--batch-size: must be a whole number >= 1"),
        (["--train-samples", "0"], "--train-samples: must be a whole number >= 1"),
        (["--lr", "-1"], "--lr: must be a finite number > 0"),
        (["--lr", "nan"], "--lr: must be a finite number > 0"),
        (["--momentum", "1"], "--momentum: must be a number in [0, 1)"),
        (["--epochs", "two"], "--epochs: must be a whole number"),
        (["--model", "cnn", "--hidden", "64"], "the cnn has a fixed head"),
    ],
)
def test_bad_arguments_are_argparse_errors(arguments, words, capsys):
    main_job = load_example("train_mnist")
    with pytest.raises(SystemExit) as exit_info:
        main_job.parse_arguments(arguments)
    assert exit_info.value.code == 2
    assert words in capsys.readouterr().err


def test_every_flag_has_help_and_the_description_names_all_three_models(capsys):
    main_job = load_example("train_mnist")
    with pytest.raises(SystemExit):
        main_job.parse_arguments(["--help"])
    text = capsys.readouterr().out
    assert all(model in text for model in ("MLP", "LSTM", "CNN"))
    parser_flags = [line.split()[0] for line in text.splitlines() if line.strip().startswith("--")]
    for line in text.split("options:")[1].split("\n  -")[1:]:
        assert len(line.split(None, 2)) >= 2, f"a flag without help: {line!r}"
    assert "--device" in text and "where to train" in text and parser_flags


def test_the_checkpoint_folder_is_created_before_training(tmp_path):
    main_job = load_example("train_mnist")
    target = tmp_path / "new" / "folder" / "run.npz"
    main_job.parse_arguments(["--checkpoint", str(target)])
    assert target.parent.is_dir() and not target.exists()


def test_a_checkpoint_of_another_size_names_the_flags_to_pass(tmp_path, capsys):
    main_job = load_example("train_mnist")
    checkpoint = tmp_path / "run.npz"
    common = ["--epochs", "1", "--train-samples", "256", "--batch-size", "128", "--no-progress", "--checkpoint", str(checkpoint)]
    main_job.main(common + ["--hidden", "32"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main_job.main(common)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "--model mlp --hidden 32 --optimizer adam" in error
    assert "strict=False" not in error
