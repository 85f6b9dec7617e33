import dataclasses
import gzip
import io
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from needle.data import MNISTChecksumError, MNISTFiles, mnist, verify_mnist_file
from needle.data import mnist_files

REAL = mnist_files._packaged_data_dir()
NAMES = list(mnist_files.FILENAMES.values())


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No $NEEDLE_DATA, an empty package data folder and a cache under tmp_path."""
    monkeypatch.delenv("NEEDLE_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(mnist_files, "_packaged_data_dir", lambda: tmp_path / "package-data")
    return tmp_path


def link_all(folder):
    """Make ``folder`` hold the four MNIST files (as symlinks to the real ones)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in NAMES:
        (folder / name).symlink_to(REAL / name)
    return folder


def test_packaged_copy_is_found_and_verified(monkeypatch):
    monkeypatch.delenv("NEEDLE_DATA", raising=False)
    files = mnist(download=False)
    assert isinstance(files, MNISTFiles)
    assert files.train_images.name == "train-images-idx3-ubyte.gz"
    assert files.test_labels.is_file()
    with pytest.raises(dataclasses.FrozenInstanceError):
        files.train_images = Path("x")


def test_search_order(isolated, monkeypatch):
    root, env, repo, cache = (link_all(isolated / d) for d in ("root", "env", "package-data", "xdg/needle/mnist"))
    monkeypatch.setenv("NEEDLE_DATA", str(env))
    assert mnist(root=root, download=False).train_images.parent == root
    assert mnist(download=False).train_images.parent == env
    monkeypatch.delenv("NEEDLE_DATA")
    assert mnist(download=False).train_images.parent == repo
    for name in NAMES:
        (repo / name).unlink()
    assert mnist(download=False).train_images.parent == cache


def test_mnist_subfolder_of_root(isolated):
    folder = link_all(isolated / "datasets" / "mnist")
    assert mnist(root=isolated / "datasets", download=False).test_images.parent == folder


def test_incomplete_folder_is_skipped(isolated):
    root = link_all(isolated / "root")
    (root / NAMES[0]).unlink()
    cache = link_all(isolated / "xdg/needle/mnist")
    assert mnist(root=root, download=False).train_images.parent == cache


def test_not_found_names_every_place(isolated, monkeypatch):
    monkeypatch.setenv("NEEDLE_DATA", str(isolated / "env"))
    with pytest.raises(FileNotFoundError) as info:
        mnist(root=isolated / "root", download=False)
    message = str(info.value)
    for place in ("root", "env", "package-data", "xdg/needle/mnist"):
        assert str(isolated / place) in message
    assert "NEEDLE_DATA=" in message and "root=" in message and "download=False" in message


def test_not_found_mentions_unset_env(isolated):
    with pytest.raises(FileNotFoundError, match=r"\$NEEDLE_DATA: \(not set\)"):
        mnist(download=False)


def test_checksum_mismatch_names_file_and_digests(isolated):
    root = link_all(isolated / "root")
    (root / "t10k-labels-idx1-ubyte.gz").unlink()
    (root / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"not mnist"))
    with pytest.raises(MNISTChecksumError) as info:
        mnist(root=root, download=False)
    message = str(info.value)
    assert "t10k-labels-idx1-ubyte.gz" in message
    assert mnist_files.CHECKSUMS["t10k-labels-idx1-ubyte.gz"] in message
    assert mnist_files._decompressed_md5(root / "t10k-labels-idx1-ubyte.gz") in message
    assert isinstance(info.value, ValueError)
    assert mnist(root=root, download=False, verify=False).test_labels.parent == root


def test_verify_rejects_unknown_names_and_bad_gzip(tmp_path):
    with pytest.raises(ValueError, match="not an MNIST file name"):
        verify_mnist_file(tmp_path / "cats.gz")
    bad = tmp_path / "t10k-labels-idx1-ubyte.gz"
    bad.write_bytes(b"plain bytes")
    with pytest.raises(MNISTChecksumError, match="cannot be decompressed"):
        verify_mnist_file(bad)


def test_verification_is_cached_per_path_mtime_size(tmp_path, monkeypatch):
    path = tmp_path / "t10k-labels-idx1-ubyte.gz"
    path.write_bytes((REAL / path.name).read_bytes())
    calls = []
    real_md5 = mnist_files._decompressed_md5
    monkeypatch.setattr(mnist_files, "_decompressed_md5", lambda p: calls.append(p) or real_md5(p))
    verify_mnist_file(path)
    verify_mnist_file(path)
    assert len(calls) == 1
    path.write_bytes(gzip.compress(b"changed"))
    with pytest.raises(MNISTChecksumError):
        verify_mnist_file(path)
    assert len(calls) == 2


class Opener:
    """A stand-in for urllib.request.urlopen serving the local files, per-mirror behaviour."""

    def __init__(self, behaviour):
        self.behaviour = behaviour  # mirror prefix -> "good" | "down" | "corrupt" | "cut"
        self.urls = []

    def __call__(self, url, timeout=None):
        self.urls.append(url)
        mirror, name = url.rsplit("/", 1)
        kind = self.behaviour[mirror + "/"]
        if kind == "down":
            raise urllib.error.URLError("mirror is down")
        data = (REAL / name).read_bytes()
        if kind == "corrupt":
            data = gzip.compress(b"corrupt" * 100)
        if kind == "cut":
            return CutStream(data)
        return io.BytesIO(data)


class CutStream(io.BytesIO):
    """A response whose connection drops after the first chunk."""

    def read(self, size=-1):
        if self.tell() > 0:
            raise ConnectionResetError("connection reset")
        return super().read(min(size, 1000))


def cache_of(tmp_path):
    return tmp_path / "xdg" / "needle" / "mnist"


def test_download_from_first_mirror(isolated, monkeypatch):
    first, second = mnist_files.MIRRORS
    opener = Opener({first: "good", second: "down"})
    monkeypatch.setattr(urllib.request, "urlopen", opener)
    files = mnist()
    cache = cache_of(isolated)
    assert files.train_images == cache / "train-images-idx3-ubyte.gz"
    assert sorted(p.name for p in cache.iterdir()) == sorted(NAMES)  # no partial files
    assert all(url.startswith(first) for url in opener.urls) and len(opener.urls) == 4
    assert (cache / NAMES[1]).read_bytes() == (REAL / NAMES[1]).read_bytes()
    assert mnist().train_labels == files.train_labels and len(opener.urls) == 4  # no re-download


@pytest.mark.parametrize("failure", ["down", "corrupt", "cut"])
def test_download_falls_back_to_next_mirror(isolated, monkeypatch, failure):
    first, second = mnist_files.MIRRORS
    opener = Opener({first: failure, second: "good"})
    monkeypatch.setattr(urllib.request, "urlopen", opener)
    files = mnist()
    cache = cache_of(isolated)
    assert sorted(p.name for p in cache.iterdir()) == sorted(NAMES)
    assert [url.rsplit("/", 1)[0] + "/" for url in opener.urls] == [first, second] * 4
    verify_mnist_file(files.test_images)


def test_all_mirrors_failing_leaves_nothing(isolated, monkeypatch):
    first, second = mnist_files.MIRRORS
    monkeypatch.setattr(urllib.request, "urlopen", Opener({first: "cut", second: "corrupt"}))
    with pytest.raises(FileNotFoundError) as info:
        mnist()
    message = str(info.value)
    assert first + NAMES[0] in message and second + NAMES[0] in message
    assert "connection reset" in message and "MD5" in message and "NEEDLE_DATA=" in message
    assert not (isolated / "xdg").exists()  # no empty cache folder left behind


def test_failure_after_some_files_removes_them_too(isolated, monkeypatch):
    first, second = mnist_files.MIRRORS
    opener = Opener({first: "good", second: "down"})

    def fail_on_second_file(url, timeout=None):
        if NAMES[1] in url:
            raise urllib.error.URLError("mirror is down")
        return opener(url, timeout)

    monkeypatch.setattr(urllib.request, "urlopen", fail_on_second_file)
    with pytest.raises(FileNotFoundError, match="mirror is down"):
        mnist()
    assert opener.urls == [first + NAMES[0]]  # the first file was fetched, then removed
    assert not (isolated / "xdg").exists()


def test_failure_keeps_folders_that_existed(isolated, monkeypatch):
    cache = cache_of(isolated)
    cache.mkdir(parents=True)
    (cache / "notes.txt").write_text("mine")
    monkeypatch.setattr(urllib.request, "urlopen", Opener(dict.fromkeys(mnist_files.MIRRORS, "down")))
    with pytest.raises(FileNotFoundError):
        mnist()
    assert sorted(p.name for p in cache.iterdir()) == ["notes.txt"]
