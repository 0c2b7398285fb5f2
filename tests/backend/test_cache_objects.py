"""The object cache: compiled PTX and cubins kept in the build cache, so a build that misses the
build cache compiles only what no earlier build compiled (the samples' program rebuilds nothing
the samples module built), under the cache's integrity rules."""

from pathlib import Path

import pytest

from iree_dispatch.backend.cache import ENTRY_FILES, Cache
from iree_dispatch.backend.pipeline import build
from iree_dispatch.frontend.spec import KernelSpec, ModuleSpec
from iree_dispatch.toolchains import NvccToolchain

from ..support.environment import ROOT, needs_build_tools

pytestmark = needs_build_tools

KERNEL = '#include "scale.h"\nextern "C" __global__ void k(const float* x, float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = SCALE * x[i]; }\n'


@pytest.fixture
def calls(tmp_path, monkeypatch):
    """A private build cache, and the number of compiles and cubin assemblies nvcc's toolchain runs."""
    monkeypatch.setenv("IREE_DISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    counts = {"compile_ptx": 0, "assemble_cubin": 0}
    for name in counts:
        real = getattr(NvccToolchain, name)

        def counted(self, *args, _real=real, _name=name, **kwargs):
            counts[_name] += 1
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(NvccToolchain, name, counted)
    return counts


def spec_of(folder: Path, flags=()) -> ModuleSpec:
    (folder / "k.cu").exists() or (folder / "k.cu").write_text(KERNEL)
    (folder / "scale.h").exists() or (folder / "scale.h").write_text("#define SCALE 2.0f\n")
    return ModuleSpec("m", (KernelSpec.declare(folder / "k.cu", "k", block=32, grid=1, shape=["n"]),), nvcc_flags=tuple(flags))


def test_samples_compile_each_source_and_arch_once(tmp_path, calls):
    from iree_dispatch.samples import build_samples

    build_samples(ROOT, tmp_path / "out", lambda _message: None)
    # 2 sources x 2 archs: the module compiles and assembles them, the program reuses all of it
    # (without the object cache: 8 and 8).
    assert calls == {"compile_ptx": 4, "assemble_cubin": 4}
    assert Cache().info()["objects"] == 8 and Cache().info()["entries"] == 2
    alone = build(_samples_spec(), tmp_path / "fresh" / "mixed_invocation.vmfb",
                  emit_mlir=tmp_path / "fresh" / "mixed_invocation.mlir", program=ROOT / "mlir" / "mixed_invocation.mlir", cache=False)
    assert alone.vmfb.read_bytes() == (tmp_path / "out" / "mixed_invocation.vmfb").read_bytes()  # objects from the cache: the same bytes


def _samples_spec() -> ModuleSpec:
    from iree_dispatch.frontend.spec_file import load_spec

    return load_spec(ROOT / "kernels" / "samples.toml")


def test_a_changed_header_or_flag_compiles_again(tmp_path, calls):
    first = build(spec_of(tmp_path), tmp_path / "a.vmfb")
    assert calls == {"compile_ptx": 2, "assemble_cubin": 2}
    build(spec_of(tmp_path), tmp_path / "b.vmfb", strip_assertions=True)  # another build, the same objects
    assert calls == {"compile_ptx": 2, "assemble_cubin": 2}
    (tmp_path / "scale.h").write_text("#define SCALE 3.0f\n")
    build(spec_of(tmp_path), tmp_path / "c.vmfb")
    assert calls == {"compile_ptx": 4, "assemble_cubin": 4}
    build(spec_of(tmp_path, ["-DUNUSED=1"]), tmp_path / "d.vmfb")  # other flags: compiled; the same PTX: its cubins reused
    assert calls == {"compile_ptx": 6, "assemble_cubin": 4}
    (tmp_path / "scale.h").write_text("#define SCALE 2.0f\n")
    again = build(spec_of(tmp_path), tmp_path / "e.vmfb", emit_mlir=tmp_path / "e.mlir")  # the IR's name is in the key: a build miss
    assert calls == {"compile_ptx": 6, "assemble_cubin": 4} and again.vmfb.read_bytes() != b""
    assert first.vmfb.read_bytes() != (tmp_path / "c.vmfb").read_bytes()
    assert {p.name for p in again.dependencies} >= {"k.cu", "scale.h"}


def test_a_damaged_object_is_a_miss_and_is_replaced(tmp_path, calls):
    build(spec_of(tmp_path), tmp_path / "a.vmfb")
    objects = sorted((tmp_path / "cache" / "objects").glob("[!.]*"))
    assert len(objects) == 4 and all((o / ENTRY_FILES / "object").is_file() for o in objects)
    for o in objects:
        (o / ENTRY_FILES / "object").write_bytes(b"garbage")
    warnings = []
    result = build(spec_of(tmp_path), tmp_path / "b.vmfb", progress=warnings.append, strip_assertions=True)  # a build miss
    assert calls == {"compile_ptx": 4, "assemble_cubin": 4}
    assert sum("damaged" in w for w in warnings) == 4
    assert result.vmfb.read_bytes() == build(spec_of(tmp_path), tmp_path / "c.vmfb", cache=False, strip_assertions=True).vmfb.read_bytes()
    assert all((o / ENTRY_FILES / "object").read_bytes() != b"garbage" for o in sorted((tmp_path / "cache" / "objects").glob("[!.]*")))


def test_no_cache_keeps_no_objects(tmp_path, calls):
    build(spec_of(tmp_path), tmp_path / "a.vmfb", cache=False)
    assert not (tmp_path / "cache" / "objects").exists()
