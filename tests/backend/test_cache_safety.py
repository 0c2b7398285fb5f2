"""The build cache folder is used only when it is safe: the user's own, not writable by anyone
else, a folder, writable. Locks never follow a planted symlink, and `cache clear` deletes only
what the cache wrote, and only in a folder that carries its CACHEDIR.TAG."""

import os
import stat
from pathlib import Path

import pytest

from iree_dispatch.backend.cache import MARKER, MARKER_SIGNATURE, Cache, CacheError
from iree_dispatch.cli import main
from iree_dispatch.core.errors import DispatchError

from ..support.build_cache import nvcc_runs, spec_of
from ..support.environment import SAMPLES_SPEC, needs_build_tools

SETTING = "IREE_DISPATCH_CACHE_DIR"


def cli(capsys, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def assert_names_the_settings(message: str) -> None:
    assert SETTING in message and "--no-cache" in message and "cache=False" in message, message


@pytest.fixture
def cache_root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv(SETTING, str(root))
    return root


# --- creating and checking the folder ----------------------------------------------------------


def test_cache_folder_is_created_private_and_tagged(cache_root):
    with Cache().lock("k"):
        pass
    assert stat.S_IMODE(os.stat(cache_root).st_mode) == 0o700
    assert (cache_root / MARKER).read_text().startswith(MARKER_SIGNATURE + "\n")
    assert stat.S_IMODE(os.stat(cache_root / "locks").st_mode) == 0o700


def test_cache_error_is_a_dispatch_error():
    assert issubclass(CacheError, DispatchError)


def fake_owner(monkeypatch, root: Path, uid: int) -> None:
    """os.stat reports `root` as owned by `uid` (tests run as root, so chown proves nothing)."""
    real = os.stat

    def stat_(path, *args, **kwargs):
        result = real(path, *args, **kwargs)
        if isinstance(path, (str, os.PathLike)) and os.path.abspath(path) == str(root):
            fields = list(result[:10])
            fields[4] = uid
            return os.stat_result(fields)
        return result

    monkeypatch.setattr(os, "stat", stat_)


def test_cache_owned_by_another_user_is_refused(cache_root, monkeypatch):
    cache_root.mkdir(mode=0o700)
    fake_owner(monkeypatch, cache_root, os.geteuid() + 1000)
    with pytest.raises(CacheError) as info:
        with Cache().lock("k"):
            pass
    message = str(info.value)
    assert str(cache_root) in message and "owned by another user" in message and f"uid {os.geteuid() + 1000}" in message
    assert_names_the_settings(message)
    assert not (cache_root / "locks").exists()


@needs_build_tools
def test_cli_build_refuses_another_users_cache_without_traceback(cache_root, monkeypatch, tmp_path, capsys):
    cache_root.mkdir(mode=0o700)
    fake_owner(monkeypatch, cache_root, os.geteuid() + 1)
    code, err = cli(capsys, "build", str(SAMPLES_SPEC), "-o", str(tmp_path / "out" / "samples.vmfb"))
    assert code == 1 and "owned by another user" in err and str(cache_root) in err
    assert_names_the_settings(err)
    assert not (tmp_path / "out" / "samples.vmfb").exists()


@pytest.mark.parametrize("mode, who", [(0o770, "group"), (0o707, "others"), (0o777, "group and others"), (0o1777, "group and others")])
def test_cache_writable_by_others_is_refused(cache_root, mode, who):
    cache_root.mkdir()
    os.chmod(cache_root, mode)
    with pytest.raises(CacheError) as info:
        with Cache().lock("k"):
            pass
    message = str(info.value)
    assert str(cache_root) in message and f"writable by {who} " in message and f"chmod go-w {cache_root}" in message
    assert_names_the_settings(message)


def test_cache_readable_by_others_is_used(cache_root):
    cache_root.mkdir()
    os.chmod(cache_root, 0o755)
    with Cache().lock("k"):
        pass
    assert (cache_root / MARKER).exists()  # a cache from before the tag (only cache files): tagged


@pytest.mark.parametrize("below", [False, True])
def test_cache_path_that_is_a_file_is_refused(cache_root, below):
    cache_root.write_text("not a folder\n")
    cache = Cache(cache_root / "sub" if below else None)
    with pytest.raises(CacheError) as info:
        with cache.lock("k"):
            pass
    message = str(info.value)
    assert str(cache.root) in message and ("is not a folder" in message or "Not a directory" in message)
    assert_names_the_settings(message)
    assert cache_root.read_text() == "not a folder\n"


@needs_build_tools
def test_cli_build_with_a_file_as_cache_fails_cleanly(cache_root, tmp_path, capsys):
    cache_root.write_text("x")
    code, err = cli(capsys, "build", str(SAMPLES_SPEC), "-o", str(tmp_path / "out" / "samples.vmfb"))
    assert code == 1 and str(cache_root) in err and "is not a folder" in err
    assert_names_the_settings(err)
    code, err = cli(capsys, "build", str(SAMPLES_SPEC), "-o", str(tmp_path / "out" / "samples.vmfb"), "--no-cache")
    assert code == 0


def test_unwritable_cache_is_refused(cache_root, monkeypatch):
    cache_root.mkdir(mode=0o700)
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, *a, **k: False if os.path.abspath(path) == str(cache_root) else real(path, mode, *a, **k))
    with pytest.raises(CacheError) as info:
        with Cache().lock("k"):
            pass
    assert str(cache_root) in str(info.value) and "not writable" in str(info.value)
    assert_names_the_settings(str(info.value))


def test_uncreatable_cache_is_refused(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "mkdir", refuse)
    cache = Cache(tmp_path / "a" / "cache")
    with pytest.raises(CacheError) as info:
        with cache.lock("k"):
            pass
    assert str(cache.root) in str(info.value) and "Permission denied" in str(info.value)
    assert_names_the_settings(str(info.value))


# --- locks -------------------------------------------------------------------------------------


def test_planted_lock_symlink_leaves_its_target_alone(cache_root, tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    (cache_root / "locks").mkdir(parents=True)
    os.chmod(cache_root, 0o700)
    (cache_root / "locks" / "k.lock").symlink_to(target)
    with pytest.raises(CacheError) as info:
        with Cache().lock("k"):
            pass
    assert "symlink" in str(info.value) and "k.lock" in str(info.value)
    assert target.read_text() == "keep me\n"


def test_planted_lock_symlink_to_a_missing_file_creates_nothing(cache_root, tmp_path):
    target = tmp_path / "created.txt"
    (cache_root / "locks").mkdir(parents=True)
    os.chmod(cache_root, 0o700)
    (cache_root / "locks" / "k.lock").symlink_to(target)
    with pytest.raises(CacheError):
        with Cache().lock("k"):
            pass
    assert not target.exists()


def test_planted_lock_fifo_is_refused_without_blocking(cache_root):
    (cache_root / "locks").mkdir(parents=True)
    os.chmod(cache_root, 0o700)
    os.mkfifo(cache_root / "locks" / "k.lock")
    with pytest.raises(CacheError, match="not a plain file"):
        with Cache().lock("k"):
            pass


def test_existing_lock_is_not_truncated(cache_root):
    (cache_root / "locks").mkdir(parents=True)
    os.chmod(cache_root, 0o700)
    (cache_root / "locks" / "k.lock").write_text("content\n")
    with Cache().lock("k"):
        pass
    assert (cache_root / "locks" / "k.lock").read_text() == "content\n"


@needs_build_tools
def test_build_with_planted_lock_symlinks_fails_cleanly(project, capsys):
    from iree_dispatch.backend.pipeline import build

    build(spec_of(project), project / "m.vmfb")
    target = project / "precious.txt"
    target.write_text("keep me\n")
    for lock in (project / "cache" / "locks").iterdir():
        lock.unlink()
        lock.symlink_to(target)
    with pytest.raises(CacheError, match="symlink"):
        build(spec_of(project), project / "m.vmfb")
    assert target.read_text() == "keep me\n"


# --- clear -------------------------------------------------------------------------------------


@needs_build_tools
def test_clear_keeps_foreign_files(project, capsys):
    from iree_dispatch.backend.pipeline import build

    build(spec_of(project), project / "m.vmfb")
    cache = project / "cache"
    (cache / "notes.txt").write_text("mine\n")
    (cache / "data").mkdir()
    (cache / "data" / "x.bin").write_bytes(b"x")
    code, err = cli(capsys, "cache", "clear")
    assert code == 0
    assert sorted(p.name for p in cache.iterdir()) == [MARKER, "data", "notes.txt"]
    assert (cache / "notes.txt").read_text() == "mine\n" and (cache / "data" / "x.bin").read_bytes() == b"x"
    build(spec_of(project), project / "m.vmfb")  # the cache works again, beside the foreign files
    assert nvcc_runs(project) == 4 and Cache().info()["entries"] == 1


def test_clear_without_the_tag_is_refused(cache_root, capsys):
    cache_root.mkdir()
    (cache_root / "entries").mkdir()
    (cache_root / "thesis.tex").write_text("years of work\n")
    code, err = cli(capsys, "cache", "clear")
    assert code == 1 and "refusing to clear" in err and MARKER in err and str(cache_root) in err and SETTING in err
    assert (cache_root / "thesis.tex").read_text() == "years of work\n" and (cache_root / "entries").is_dir()


def test_clear_with_a_wrong_tag_is_refused(cache_root):
    cache_root.mkdir()
    (cache_root / MARKER).write_text("Signature: something else\n")
    (cache_root / "entries").mkdir()
    with pytest.raises(CacheError, match="refusing to clear"):
        Cache().clear()
    assert (cache_root / "entries").is_dir()


def test_clear_returns_what_it_kept(cache_root):
    with Cache().lock("k"):
        pass
    (cache_root / "notes.txt").write_text("x")
    assert Cache().clear() == [cache_root / "notes.txt"]
    assert not (cache_root / "locks").exists() and (cache_root / MARKER).exists()
    (cache_root / "notes.txt").unlink()
    assert Cache().clear() == [] and not cache_root.exists()


def test_clear_of_a_missing_cache_is_a_no_op(cache_root):
    assert Cache().clear() == []
    assert not cache_root.exists()


def test_clear_does_not_follow_symlinked_cache_folders(cache_root, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep\n")
    with Cache().lock("k"):
        pass
    os.rename(cache_root / "locks", tmp_path / "old-locks")
    (cache_root / "locks").symlink_to(elsewhere)
    Cache().clear()
    assert (elsewhere / "keep.txt").read_text() == "keep\n" and not cache_root.exists()


def test_folder_with_foreign_files_is_not_tagged_but_works(cache_root):
    cache_root.mkdir(mode=0o700)
    (cache_root / "other.txt").write_text("x")
    with Cache().lock("k"):
        pass
    assert not (cache_root / MARKER).exists()
    with pytest.raises(CacheError, match="refusing to clear"):
        Cache().clear()
    assert (cache_root / "other.txt").exists() and (cache_root / "locks").exists()
