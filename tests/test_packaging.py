"""Packaging: the wheel's package data covers MNIST and py.typed; LICENSE; the data/ mirror."""
import fnmatch
from pathlib import Path

import pytest

from needle.data import mnist_files, verify_mnist_file

REPO = Path(__file__).resolve().parents[1]


def pyproject():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def packaged_files(package):
    """Files under ``package/`` that the package-data globs of pyproject.toml select."""
    patterns = pyproject()["tool"]["setuptools"]["package-data"][package]
    root = REPO / package
    files = [path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file()]
    return sorted(name for name in files if any(fnmatch.fnmatch(name, pattern) for pattern in patterns))


def test_wheel_package_data_holds_the_four_mnist_files_and_py_typed():
    expected = sorted(f"_data/mnist/{name}" for name in mnist_files.FILENAMES.values())
    assert packaged_files("needle") == sorted(expected + ["py.typed"])
    assert packaged_files("trainers") == ["py.typed"]


def test_the_finder_uses_the_packaged_copy_which_verifies(monkeypatch):
    monkeypatch.delenv("NEEDLE_DATA", raising=False)
    files = mnist_files.mnist(download=False)
    assert files.train_images.parent == REPO / "needle" / "_data" / "mnist"
    for name in mnist_files.FILENAMES.values():
        verify_mnist_file(files.train_images.parent / name)


def test_the_repository_data_folder_mirrors_the_packaged_copy():
    """data/ stays for course code that opens "data/train-images-idx3-ubyte.gz" from the repo root."""
    for name in mnist_files.FILENAMES.values():
        assert (REPO / "data" / name).read_bytes() == (REPO / "needle" / "_data" / "mnist" / name).read_bytes()


def test_license_is_the_mit_license_that_pyproject_names():
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License") and "needle contributors" in text
    assert pyproject()["project"]["license"] == "MIT"
    assert pyproject()["project"]["license-files"] == ["LICENSE"]


def test_extras_for_plots_docs_and_the_cpu_torch_note():
    extras = pyproject()["project"]["optional-dependencies"]
    assert any(requirement.startswith("matplotlib") for requirement in extras["plot"])
    assert any(requirement.startswith("pdoc") for requirement in extras["docs"])
    assert "--index-url https://download.pytorch.org/whl/cpu" in (REPO / "pyproject.toml").read_text()
