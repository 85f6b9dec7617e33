"""``needle.atomic_file``: whole-or-nothing writes, errors that name the user's path, kept modes,
and a cleanup of stale temporary files that never sends a real signal to anyone."""
import errno
import os
import re

import pytest

from needle import atomic_file as atomic

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX process ids and permission bits")
TEMPORARY_NAME = r"\.{name}\.{pid}\.[0-9a-f]{{8}}\.tmp"


def write_text(path, text, **options):
    with atomic.atomic_write(path, **options) as stream:
        stream.write(text)


def stale_temporary(folder, name, pid, suffix="0123abcd"):
    """A temporary file of ``folder/name`` as a writer with process id ``pid`` leaves it."""
    temporary = folder / f".{name}.{pid}.{suffix}.tmp"
    temporary.write_text("half written")
    return temporary


class RecordedKill:
    """Stands in for ``os.kill``: records every (pid, signal) and answers as a process table would."""

    def __init__(self, answer=None):
        self.calls = []
        self.answer = answer  # an exception to raise, or None for "the process runs"

    def __call__(self, pid, sent):
        self.calls.append((pid, sent))
        if self.answer is not None:
            raise self.answer


# ---- what is written ------------------------------------------------------------------------------
def test_text_and_bytes_replace_the_file_whole(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("old")
    write_text(path, "new text")
    assert path.read_text() == "new text"
    with atomic.atomic_write(str(path), "wb") as stream:  # a str path works too
        stream.write(b"\x00\x01bytes")
    assert path.read_bytes() == b"\x00\x01bytes"
    assert os.listdir(tmp_path) == ["notes.txt"]


def test_open_options_reach_open(tmp_path):
    path = tmp_path / "rows.csv"
    write_text(path, "a\nb\n", newline="\r\n", encoding="utf-16")
    assert path.read_bytes().decode("utf-16") == "a\r\nb\r\n"


def test_the_data_goes_to_a_named_temporary_beside_the_file_until_the_block_ends(tmp_path):
    path = tmp_path / "model.npz"
    path.write_text("old")
    with atomic.atomic_write(path) as stream:
        stream.write("new")
        names = sorted(os.listdir(tmp_path))
        assert path.read_text() == "old"  # nothing replaced before the block succeeds
    assert len(names) == 2 and names[1] == "model.npz"
    assert re.fullmatch(TEMPORARY_NAME.format(name=re.escape("model.npz"), pid=os.getpid()), names[0]), names[0]
    assert path.read_text() == "new" and os.listdir(tmp_path) == ["model.npz"]


def test_the_data_is_flushed_and_synced_before_the_rename(tmp_path, monkeypatch):
    path = tmp_path / "log.txt"
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: (events.append(("fsync", os.fstat(fd).st_size)), real_fsync(fd)))
    monkeypatch.setattr(atomic.os, "replace", lambda a, b: (events.append(("replace", str(b))), real_replace(a, b)))
    write_text(path, "12345")
    # the file's own fsync sees all 5 bytes (flushed), then the rename, then the folder's fsync
    assert events[:2] == [("fsync", 5), ("replace", str(path))]
    assert events[2][0] == "fsync" and len(events) == 3


def test_a_name_taken_by_another_temporary_is_skipped(tmp_path, monkeypatch):
    path = tmp_path / "model.npz"
    taken = stale_temporary(tmp_path, "model.npz", os.getpid(), suffix="00000000")
    draws = iter(["00000000", "11111111"])
    monkeypatch.setattr(atomic.secrets, "token_hex", lambda size: next(draws))
    write_text(path, "new")
    assert path.read_text() == "new"
    assert taken.read_text() == "half written"  # never opened over: our own process id keeps it


# ---- a bad mode -----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["a", "r", "w+", "x", "wt+", "ab", "", None])
def test_a_bad_mode_is_refused_before_anything_is_written(tmp_path, mode):
    path = tmp_path / "notes.txt"
    path.write_text("old")
    with pytest.raises(ValueError, match=re.escape(f"atomic_write mode must be 'w' or 'wb'; got mode={mode!r}")):
        with atomic.atomic_write(path, mode):
            pass
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["notes.txt"]


# ---- modes ----------------------------------------------------------------------------------------
@posix_only
@pytest.mark.parametrize("mode", [0o755, 0o700, 0o750, 0o711, 0o644, 0o4755, 0o2750, 0o1777])
def test_replacing_a_file_keeps_its_mode_execute_and_special_bits_included(tmp_path, mode):
    path = tmp_path / "run.sh"
    path.write_text("#!/bin/sh\n")
    os.chmod(path, mode)
    write_text(path, "#!/bin/sh\necho new\n")
    assert os.stat(path).st_mode & 0o7777 == mode
    assert path.read_text().endswith("echo new\n")


@posix_only
@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_a_new_file_gets_what_open_would_give_it(tmp_path, umask):
    previous = os.umask(umask)
    try:
        write_text(tmp_path / "new.txt", "x")
    finally:
        os.umask(previous)
    assert os.stat(tmp_path / "new.txt").st_mode & 0o7777 == 0o666 & ~umask


def test_a_file_system_without_permission_bits_still_gets_the_file(tmp_path, monkeypatch):
    path = tmp_path / "notes.txt"
    path.write_text("old")

    def refuse(*args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(atomic.os, "chmod", refuse)
    write_text(path, "new")
    assert path.read_text() == "new" and os.listdir(tmp_path) == ["notes.txt"]


# ---- errors name the user's path and change nothing ----------------------------------------------
def assert_names_the_path(error, path, words):
    message = str(error)
    assert f"cannot save the plot {path}" in message, message
    assert words in message, message
    assert ".tmp" not in message, f"names the temporary file: {message}"
    assert error.filename == str(path)


def assert_unchanged(folder, path):
    assert path.read_text() == "old", "the original file was changed"
    assert os.listdir(folder) == [path.name], f"left behind: {os.listdir(folder)}"


def test_an_oserror_while_writing_names_the_path_and_changes_nothing(tmp_path):
    path = tmp_path / "curve.png"
    path.write_text("old")
    with pytest.raises(OSError) as caught:
        with atomic.atomic_write(path, what="plot") as stream:
            stream.write("half")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / ".curve.png.1.00000000.tmp"))
    assert type(caught.value) is OSError and caught.value.errno == errno.ENOSPC
    assert_names_the_path(caught.value, path, "No space left on device")
    assert caught.value.__cause__ is not None and caught.value.__cause__.errno == errno.ENOSPC
    assert_unchanged(tmp_path, path)


def test_an_oserror_while_syncing_names_the_path_and_changes_nothing(tmp_path, monkeypatch):
    path = tmp_path / "curve.png"
    path.write_text("old")

    def fail(descriptor):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(atomic.os, "fsync", fail)
    with pytest.raises(OSError) as caught:
        write_text(path, "new", what="plot")
    assert_names_the_path(caught.value, path, os.strerror(errno.EIO))
    monkeypatch.undo()
    assert_unchanged(tmp_path, path)


@pytest.mark.parametrize("error, kind, words", [
    (OSError(errno.EXDEV, "Invalid cross-device link"), OSError, "Invalid cross-device link"),
    (PermissionError(errno.EACCES, "Permission denied"), PermissionError, "no permission to write in"),
    (IsADirectoryError(errno.EISDIR, "Is a directory"), IsADirectoryError, "Is a directory"),
])
def test_an_oserror_while_replacing_names_the_path_and_changes_nothing(tmp_path, monkeypatch, error, kind, words):
    path = tmp_path / "curve.png"
    path.write_text("old")

    def refuse(source, target):
        error.filename, error.filename2 = str(source), str(target)
        raise error

    monkeypatch.setattr(atomic.os, "replace", refuse)
    with pytest.raises(kind) as caught:
        write_text(path, "new", what="plot")
    assert type(caught.value) is kind
    assert_names_the_path(caught.value, path, words)
    if kind is PermissionError:
        assert str(tmp_path) in str(caught.value) and "change its permissions" in str(caught.value)
    assert caught.value.__cause__ is error
    monkeypatch.undo()
    assert_unchanged(tmp_path, path)


def test_an_error_without_strerror_keeps_its_text(tmp_path, monkeypatch):
    path = tmp_path / "curve.png"
    path.write_text("old")
    monkeypatch.setattr(atomic.os, "replace", lambda source, target: (_ for _ in ()).throw(OSError("disk went away")))
    with pytest.raises(OSError, match=r"cannot save the plot .*curve.png: disk went away"):
        write_text(path, "new", what="plot")
    monkeypatch.undo()
    assert_unchanged(tmp_path, path)


def test_other_exceptions_pass_through_unchanged_and_change_nothing(tmp_path):
    path = tmp_path / "curve.png"
    path.write_text("old")
    for error in (KeyboardInterrupt("Ctrl-C"), ValueError("the user's own error")):
        with pytest.raises(type(error)) as caught:
            with atomic.atomic_write(path) as stream:
                stream.write("half")
                raise error
        assert caught.value is error
        assert_unchanged(tmp_path, path)


def test_a_temporary_removed_by_the_block_itself_is_no_second_error(tmp_path):
    path = tmp_path / "curve.png"
    path.write_text("old")
    with pytest.raises(ValueError, match="gone"):
        with atomic.atomic_write(path):
            for name in os.listdir(tmp_path):
                if name.endswith(".tmp"):
                    os.unlink(tmp_path / name)
            raise ValueError("gone")
    assert_unchanged(tmp_path, path)


def test_a_missing_folder_is_named_with_the_fix(tmp_path):
    path = tmp_path / "no" / "such" / "curve.png"
    with pytest.raises(FileNotFoundError) as caught:
        write_text(path, "x", what="plot")
    message = caught.value.strerror
    assert message.startswith(f"cannot save the plot {path}: the folder {path.parent} does not exist")
    assert f"os.makedirs({str(path.parent)!r}, exist_ok=True)" in message
    assert caught.value.filename == str(path) and caught.value.errno == errno.ENOENT


def test_a_folder_that_is_a_file_is_named(tmp_path):
    (tmp_path / "plots").write_text("a file, not a folder")
    path = tmp_path / "plots" / "curve.png"
    with pytest.raises(NotADirectoryError) as caught:  # from stat(), before any temporary exists
        write_text(path, "x", what="plot")
    assert caught.value.strerror == f"cannot save the plot {path}: {os.strerror(errno.ENOTDIR)}"
    assert caught.value.filename == str(path)


def test_a_refused_temporary_names_the_path(tmp_path, monkeypatch):
    def refuse(name, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(name))

    monkeypatch.setattr(atomic.os, "open", refuse)
    with pytest.raises(PermissionError) as caught:
        write_text(tmp_path / "curve.png", "x", what="plot")
    assert caught.value.strerror == (
        f"cannot save the plot {tmp_path / 'curve.png'}: no permission to write in {tmp_path} "
        f"(choose a writable folder, or change its permissions)"
    )
    monkeypatch.undo()
    assert os.listdir(tmp_path) == []


# ---- stale temporaries: liveness by signal 0 only ---------------------------------------------------
@posix_only
def test_the_liveness_check_sends_signal_zero_and_removes_a_dead_writers_file(tmp_path, monkeypatch):
    kill = RecordedKill(ProcessLookupError(errno.ESRCH, "No such process"))
    monkeypatch.setattr(atomic.os, "kill", kill)
    dead = stale_temporary(tmp_path, "model.npz", 999_999)
    write_text(tmp_path / "model.npz", "new")
    assert kill.calls == [(999_999, 0)], "the liveness probe must be signal 0, which delivers nothing"
    assert not dead.exists()
    assert os.listdir(tmp_path) == ["model.npz"]


@posix_only
@pytest.mark.parametrize("answer", [None, PermissionError(errno.EPERM, "Operation not permitted")],
                         ids=["runs", "runs-as-another-user"])
def test_a_live_writers_file_is_kept(tmp_path, monkeypatch, answer):
    kill = RecordedKill(answer)
    monkeypatch.setattr(atomic.os, "kill", kill)
    live = stale_temporary(tmp_path, "model.npz", 4242)
    write_text(tmp_path / "model.npz", "new")
    assert kill.calls == [(4242, 0)]
    assert live.read_text() == "half written"


@posix_only
def test_our_own_process_is_never_probed_and_its_files_are_kept(tmp_path, monkeypatch):
    kill = RecordedKill(ProcessLookupError())
    monkeypatch.setattr(atomic.os, "kill", kill)
    ours = stale_temporary(tmp_path, "model.npz", os.getpid())  # another thread may be writing it
    write_text(tmp_path / "model.npz", "new")
    assert kill.calls == [] and ours.exists()


@posix_only
def test_a_real_probe_delivers_no_signal(tmp_path):
    """With the real ``os.kill``: a live process that would die of any real signal survives the probe."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        live = stale_temporary(tmp_path, "model.npz", child.pid)
        atomic.remove_stale_temporaries(tmp_path / "model.npz")
        assert live.exists() and child.poll() is None, "the probe signalled the writer"
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    assert child.returncode == 0, f"the writer ended with {child.returncode} (killed by a signal?)"
    atomic.remove_stale_temporaries(tmp_path / "model.npz")  # its writer is gone now
    assert not live.exists()


@posix_only
def test_only_this_files_temporaries_are_considered(tmp_path, monkeypatch):
    kill = RecordedKill(ProcessLookupError())
    monkeypatch.setattr(atomic.os, "kill", kill)
    others = [
        stale_temporary(tmp_path, "modelXnpz", 999_999),  # "." in the name is no wildcard
        stale_temporary(tmp_path, "other.npz", 999_999),
        stale_temporary(tmp_path, "model.npz.bak", 999_999),
        tmp_path / ".model.npz.999999.0123abc.tmp",  # 7 hex digits: not one of ours
        tmp_path / ".model.npz.999999.0123ABCD.tmp",  # upper case: not one of ours
        tmp_path / "x.model.npz.999999.0123abcd.tmp",
        tmp_path / ".model.npz.999999.0123abcd.tmp.old",
        tmp_path / ".model.npz.pid.0123abcd.tmp",
    ]
    for other in others[3:]:
        other.write_text("not ours")
    atomic.remove_stale_temporaries(tmp_path / "model.npz")
    assert kill.calls == []
    assert all(other.exists() for other in others)


@posix_only
def test_every_dead_writers_file_is_removed_whatever_the_folder_lists_first(tmp_path, monkeypatch):
    alive, dead = 4242, 999_999
    monkeypatch.setattr(atomic.os, "kill", lambda pid, sent: (_ for _ in ()).throw(ProcessLookupError()) if pid == dead else None)
    live = stale_temporary(tmp_path, "model.npz", alive)
    stale = [stale_temporary(tmp_path, "model.npz", dead, suffix=suffix) for suffix in ("0000aaaa", "1111bbbb")]
    (tmp_path / "unrelated.txt").write_text("x")
    listed = ["unrelated.txt", live.name, stale[0].name, "model.npz", stale[1].name]
    monkeypatch.setattr(atomic.os, "listdir", lambda folder: list(listed))
    atomic.remove_stale_temporaries(tmp_path / "model.npz")
    assert live.exists() and (tmp_path / "unrelated.txt").exists()
    assert not any(path.exists() for path in stale)


@posix_only
def test_cleanup_survives_a_missing_folder_and_a_file_removed_meanwhile(tmp_path, monkeypatch):
    atomic.remove_stale_temporaries(tmp_path / "missing" / "model.npz")  # no error
    monkeypatch.setattr(atomic.os, "kill", RecordedKill(ProcessLookupError()))
    first = stale_temporary(tmp_path, "model.npz", 999_998)
    second = stale_temporary(tmp_path, "model.npz", 999_999)
    real_unlink = os.unlink

    def unlink_raced(name):
        if str(name).endswith(first.name):
            real_unlink(name)  # another save removed it first ...
        real_unlink(name)  # ... so this one fails

    monkeypatch.setattr(atomic.os, "unlink", unlink_raced)
    atomic.remove_stale_temporaries(str(tmp_path / "model.npz"))
    assert not first.exists() and not second.exists()


def test_cleanup_is_skipped_where_process_ids_cannot_be_probed(tmp_path, monkeypatch):
    kill = RecordedKill(ProcessLookupError())
    monkeypatch.setattr(atomic.os, "kill", kill)
    stale = stale_temporary(tmp_path, "model.npz", 999_999)
    monkeypatch.setattr(atomic.os, "name", "nt")
    atomic.remove_stale_temporaries(tmp_path / "model.npz")
    monkeypatch.undo()
    assert kill.calls == [] and stale.exists()


# ---- the folder's fsync -----------------------------------------------------------------------------
def test_fsync_folder_syncs_the_folder_and_closes_it(tmp_path, monkeypatch):
    synced, closed = [], []
    real_close = os.close
    monkeypatch.setattr(atomic.os, "fsync", lambda fd: synced.append(os.path.samestat(os.fstat(fd), os.stat(tmp_path))))
    monkeypatch.setattr(atomic.os, "close", lambda fd: (closed.append(fd), real_close(fd)))
    atomic.fsync_folder(tmp_path)
    assert synced == [True] and len(closed) == 1


def test_fsync_folder_ignores_what_the_platform_refuses(tmp_path, monkeypatch):
    atomic.fsync_folder(tmp_path / "missing")  # cannot open: nothing to do
    closed = []
    real_close = os.close

    def refuse(descriptor):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(atomic.os, "fsync", refuse)
    monkeypatch.setattr(atomic.os, "close", lambda fd: (closed.append(fd), real_close(fd)))
    atomic.fsync_folder(tmp_path)
    assert len(closed) == 1, "the descriptor must be closed even when fsync fails"

