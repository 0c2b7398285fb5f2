"""The build cache: warm rebuilds skip every tool, headers invalidate, concurrent builds do the
work once, and a killed build leaves nothing broken behind."""

import os
import signal
import subprocess
import sys
import textwrap
import time

from iree_dispatch.backend.cache import Cache
from iree_dispatch.backend.pipeline import build
from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec

from ..support.build_cache import nvcc_runs, spec_of
from ..support.environment import ROOT, needs_build_tools

pytestmark = needs_build_tools


def test_warm_rebuild_uses_no_tool_and_is_fast(project):
    first = build(spec_of(project), project / "out" / "m.vmfb", emit_mlir=project / "out" / "m.mlir")
    assert nvcc_runs(project) == 2 and "nvcc" in first.timings  # sm_80 and sm_90
    vmfb = first.vmfb.read_bytes()
    started = time.perf_counter()
    again = build(spec_of(project), project / "out" / "m.vmfb", emit_mlir=project / "out" / "m.mlir")
    elapsed = time.perf_counter() - started
    assert nvcc_runs(project) == 2 and set(again.timings) == {"cache"}
    assert again.vmfb.read_bytes() == vmfb and elapsed < 0.2
    assert {p.name for p in again.dependencies} >= {"k.cu", "scale.h"}


def test_changing_an_included_header_rebuilds(project):
    first = build(spec_of(project), project / "m.vmfb").vmfb.read_bytes()
    (project / "scale.h").write_text("#define SCALE 3.0f\n")
    second = build(spec_of(project), project / "m.vmfb").vmfb.read_bytes()
    assert nvcc_runs(project) == 4 and second != first
    (project / "scale.h").write_text("#define SCALE 2.0f\n")  # back: cached again
    assert build(spec_of(project), project / "m.vmfb").vmfb.read_bytes() == first and nvcc_runs(project) == 4


BUILD_SCRIPT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    sys.path.insert(0, {root!r})
    from iree_dispatch.backend.pipeline import build
    from tests.support.build_cache import spec_of
    folder = Path({folder!r})
    build(spec_of(folder), folder / "out{{}}".format(sys.argv[1]) / "m.vmfb")
    """
)


def test_concurrent_builds_do_the_work_once(project):
    script = BUILD_SCRIPT.format(root=str(ROOT), folder=str(project))
    procs = [subprocess.Popen([sys.executable, "-c", script, str(i)], stderr=subprocess.PIPE, text=True) for i in range(8)]
    errors = [p.communicate(timeout=240)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, errors
    assert nvcc_runs(project) == 2  # one build's nvcc work (two archs)
    outputs = {(project / f"out{i}" / "m.vmfb").read_bytes() for i in range(8)}
    assert len(outputs) == 1


def test_a_killed_build_leaves_no_entry_and_no_lock(project):
    script = BUILD_SCRIPT.format(root=str(ROOT), folder=str(project))
    proc = subprocess.Popen([sys.executable, "-c", script, "0"], env={**os.environ, "NVCC_DELAY": "30"}, start_new_session=True)
    deadline = time.time() + 60
    while nvcc_runs(project) == 0 and time.time() < deadline:  # it holds the lock and is in nvcc
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert Cache().info()["entries"] == 0
    assert not (project / "out0" / "m.vmfb").exists()
    started = time.time()
    result = build(spec_of(project), project / "out1" / "m.vmfb")  # the lock died with the process
    assert result.vmfb.exists() and time.time() - started < 60
    assert Cache().info()["entries"] == 1


def test_cache_info_and_clear(project, capsys):
    from iree_dispatch.cli import main

    build(spec_of(project), project / "m.vmfb")
    assert main(["cache", "info"]) == 0 and "1 builds" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0 and not (project / "cache").exists()
    build(spec_of(project), project / "m.vmfb", cache=False)
    assert Cache().info()["entries"] == 0 and nvcc_runs(project) == 4


@needs_build_tools
def test_spec_changes_that_callers_dont_see_change_the_key(tmp_path, monkeypatch, cu):
    """A computed scalar's expression or a declared signature changes the generated code
    without changing the function's arguments: each must miss the cache."""
    from iree_dispatch.backend.pipeline import build

    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    source = cu('extern "C" __global__ void k(const float* x, float* y, int n, int m) { int i = threadIdx.x; if (i < n) y[i] = x[i] * m; }\n')

    def spec(m: str) -> ModuleSpec:
        return ModuleSpec("m", (KernelSpec.declare(source, "k", block=32, grid=1, shape=["n"], scalars={"m": m}),))

    assert "cache" not in build(spec("n"), tmp_path / "a" / "m.vmfb").timings
    assert "cache" in build(spec("n"), tmp_path / "b" / "m.vmfb").timings
    assert "cache" not in build(spec("n + 1"), tmp_path / "c" / "m.vmfb").timings
