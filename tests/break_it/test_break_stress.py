"""Races and interrupts, kept fast enough for CI (about 20 s): concurrent warm builds to one
output and to one depfile, a build killed mid-way (its temporaries swept by the next one),
Ctrl-C (exit 130 at once, no traceback, no compiler left running), and the pieces behind them
(the objects folder replaced by many processes at once, depfiles written by many at once)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from iree_dispatch.backend import pipeline
from iree_dispatch.core import files

from ..support.break_it import project, snapshot
from ..support.environment import ROOT, needs_build_tools

CONCURRENT = int(os.environ.get("IREE_DISPATCH_STRESS", "40"))  # raise it by hand: IREE_DISPATCH_STRESS=500


def command(*argv: str) -> list[str]:
    return [sys.executable, "-m", "iree_dispatch.cli", *argv]


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) if folder.exists() else []


@pytest.fixture
def proj(tmp_path, monkeypatch):
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    return project(tmp_path)


def run_all(commands: list[list[str]]) -> list[subprocess.CompletedProcess]:
    with ThreadPoolExecutor(len(commands)) as pool:
        return list(pool.map(lambda c: subprocess.run(c, capture_output=True, text=True, timeout=300), commands))


@needs_build_tools
def test_concurrent_warm_builds_to_one_output(proj):
    spec, out = proj / "kernels" / "samples.toml", proj / "out" / "samples.vmfb"
    first = subprocess.run(command("build", str(spec), "-o", str(out), "--emit-mlir"), capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    expected = snapshot(out.parent)
    results = run_all([command("build", str(spec), "-o", str(out), "--emit-mlir") for _ in range(CONCURRENT)])
    failed = [r.stderr for r in results if r.returncode != 0]
    assert not failed, f"{len(failed)} of {CONCURRENT} failed; first: {failed[0]}"
    assert snapshot(out.parent) == expected and temporaries(out.parent) == []


@needs_build_tools
def test_concurrent_builds_with_one_depfile(proj):
    spec, depfile = proj / "kernels" / "samples.toml", proj / "out" / "samples.d"
    warm = subprocess.run(command("build", str(spec), "-o", str(proj / "warm" / "samples.vmfb")), capture_output=True, text=True)
    assert warm.returncode == 0, warm.stderr
    results = run_all([command("build", str(spec), "-o", str(proj / f"o{i % 4}" / "samples.vmfb"), "--depfile", str(depfile)) for i in range(CONCURRENT)])
    failed = [r.stderr for r in results if r.returncode != 0]
    assert not failed, f"{len(failed)} of {CONCURRENT} failed; first: {failed[0]}"
    text = depfile.read_text()
    assert text.startswith(str(proj / "o")) and str(spec) in text and text.endswith("\n")
    assert temporaries(depfile.parent) == [] and all(temporaries(proj / f"o{i}") == [] for i in range(4))


def test_depfile_written_by_many_at_once(tmp_path):
    depfile = tmp_path / "m.d"
    prerequisites = [tmp_path / f"src{i}.cu" for i in range(50)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: pipeline.write_depfile(depfile, tmp_path / "m.vmfb", prerequisites), range(400)))
    assert depfile.read_text().count("src") == 50 and temporaries(tmp_path) == []


def test_objects_folder_replaced_by_many_at_once(tmp_path):
    """files.replace_folder from many threads: every move succeeds, one complete folder stays."""
    final = tmp_path / "m.objects"
    barrier = threading.Barrier(16)

    def one(i: int) -> None:
        private = Path(tempfile.mkdtemp(prefix=".m.vmfb.", dir=tmp_path))
        staged = private / "m.objects"
        staged.mkdir()
        for name in ("a.ptx", "b.cubin"):
            (staged / name).write_text(name)
        if i < 16:
            barrier.wait()
        files.replace_folder(staged, final)
        shutil.rmtree(private)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(400)))
    assert sorted(p.name for p in final.iterdir()) == ["a.ptx", "b.cubin"] and temporaries(tmp_path) == []


def test_sweep_stale_temporaries(tmp_path):
    old = time.time() - 2 * files.STALE_TEMP_SECONDS
    dead = 2**22 + 12345  # a pid no process has (pid_max is at most 2**22)
    tag = files._host_tag()
    live = tmp_path / f".m.vmfb.{os.getpid()}@{tag}.abcd1234"
    killed = tmp_path / f".m.vmfb.{dead}@{tag}.abcd1234"
    other_host = tmp_path / f".m.vmfb.{dead}@00000000.abcd1234"
    ancient = tmp_path / ".m.vmfb.abcd1234"  # as older versions named them
    old_depfile_tmp = tmp_path / ".m.vmfb.tmp"
    user_files = [tmp_path / ".m.vmfb.notes.txt", tmp_path / ".m.vmfb.backup", tmp_path / "m.vmfb", tmp_path / ".m.vmfb.original" / "mine.txt"]
    for folder in (live, killed, other_host, ancient, tmp_path / ".m.vmfb.original"):
        (folder / "m.objects").mkdir(parents=True)
    for path in (old_depfile_tmp, *user_files):
        path.write_text("x")
    for path in (ancient, old_depfile_tmp, *user_files, tmp_path / ".m.vmfb.original"):
        os.utime(path, (old, old))
    removed = files.sweep_stale_temps(tmp_path, "m.vmfb")
    assert sorted(removed) == sorted([killed, ancient, old_depfile_tmp])
    assert live.exists() and other_host.exists() and all(p.exists() for p in user_files)


def _wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@needs_build_tools
def test_a_killed_build_leaves_nothing_after_the_next(proj):
    spec, out = proj / "kernels" / "samples.toml", proj / "out" / "m.vmfb"
    proc = subprocess.Popen(command("build", str(spec), "-o", str(out), "--no-cache"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for(lambda: temporaries(out.parent) != [])
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the build and its compilers, like an OOM kill or kill -9 of the job
        proc.wait()
    assert temporaries(out.parent) != [] and not out.exists()
    again = subprocess.run(command("build", str(spec), "-o", str(out)), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert temporaries(out.parent) == [] and out.is_file()


def _compilers_mentioning(text: str) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline and ("nvcc" in cmdline or "cicc" in cmdline or "ptxas" in cmdline):
                found.append(cmdline)
    return found


@needs_build_tools
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds child processes through /proc")
@pytest.mark.parametrize("whole_group", [False, True], ids=["sigint-to-the-command", "ctrl-c-in-a-terminal"])
def test_ctrl_c_exits_130_at_once(tmp_path, monkeypatch, whole_group):
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out" / "library.vmfb"
    proc = subprocess.Popen(command("build", str(ROOT / "kernels" / "library.toml"), "-o", str(out), "--no-cache", "--arch", "sm_80,sm_86,sm_89,sm_90"),
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    lines = []
    while not any("nvcc" in line for line in lines):  # the compilers are running
        line = proc.stderr.readline()
        assert line, "".join(lines)
        lines.append(line)
    time.sleep(0.2)
    started = time.monotonic()
    (os.killpg if whole_group else os.kill)(proc.pid, signal.SIGINT)
    rest = proc.communicate(timeout=30)[1]
    elapsed = time.monotonic() - started
    # At once: 0.04-0.05 s alone on a 2-core machine; 1.01 s was seen there late in the whole
    # suite (the compilers it stops hold the output pipes until they are gone). The build it
    # would otherwise wait for takes over 10 s.
    assert proc.returncode == 130 and elapsed < 2.0, (proc.returncode, elapsed, rest)
    assert "Traceback" not in rest and rest.endswith("iree-dispatch build: interrupted\n"), rest
    time.sleep(0.3)
    assert _compilers_mentioning(str(tmp_path)) == []
    assert temporaries(out.parent) == [] and not out.exists()
