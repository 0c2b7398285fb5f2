"""Builds every module the GPU tests (and the benchmarks) load, on a machine with the compiler:

    python -m artifacts build/gpu-tests

then carry build/gpu-tests to the GPU machine, where the tests read them
($IREE_DISPATCH_PREBUILT, default build/gpu-tests)."""

from __future__ import annotations

import sys
from pathlib import Path

from . import attention, fuzz, gemm, gemm_f32, gemm_nt, library, multi_spec, nonconst, objects, prebuilt, samples, styles, toolchains, transformer

ROOT = Path(__file__).resolve().parent.parent

target = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build" / "gpu-tests")
built = {**samples.build_all(target), **objects.build_all(target / "objects"), **library.build_all(target / "library")}
for folder, builder in (("transformer", transformer), ("prebuilt", prebuilt), ("toolchains", toolchains), ("gemm", gemm), ("attention", attention), ("gemm_nt", gemm_nt),
                        ("gemm_f32", gemm_f32), ("multi_spec", multi_spec), ("styles", styles), ("nonconst", nonconst),
                        ("fuzz", fuzz)):
    built.update({f"{folder}/{name}": path for name, path in builder.build_all(target / folder).items()})
for name, path in built.items():
    print(f"{name}: {path}")
