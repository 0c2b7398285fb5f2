"""Builds the modules the GPU tests (and the benchmarks) load, on a machine with the compiler:

    python -m tests.support.artifacts build/gpu-tests                     # every group
    python -m tests.support.artifacts --only library --only gemm build/gpu-tests

then carry build/gpu-tests to the GPU machine, where the tests read them
($IREE_DISPATCH_PREBUILT, default build/gpu-tests). Each group goes to its own folder under
OUT (the samples to OUT itself), where the tests look for it."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from . import (
    attention,
    flash_attention,
    flash_attention_f32,
    flash_attention_f32_f64acc,
    fuzz,
    gemm,
    gemm_f32,
    gemm_f32_f64acc,
    gemm_f32_m96,
    gemm_n128,
    gemm_n192,
    gemm_nt,
    library,
    model_ops,
    multi_device,
    multi_spec,
    nonconst,
    objects,
    prebuilt,
    samples,
    sdpa_model,
    structs,
    styles,
    templates,
    toolchains,
    transformer,
    zero_shmem,
)

ROOT = Path(__file__).resolve().parents[3]

# group → (its folder under OUT, its builder), in the order a full build runs them.
GROUPS: dict[str, tuple[str, Callable[[Path], dict[str, Path]]]] = {
    "samples": ("", samples.build_all),
    "objects": ("objects", objects.build_all),
    "library": ("library", library.build_all),
    "transformer": ("transformer", transformer.build_all),
    "prebuilt": ("prebuilt", prebuilt.build_all),
    "toolchains": ("toolchains", toolchains.build_all),
    "gemm": ("gemm", gemm.build_all),
    "attention": ("attention", attention.build_all),
    "gemm_nt": ("gemm_nt", gemm_nt.build_all),
    "gemm_n128": ("gemm_n128", gemm_n128.build_all),
    "gemm_n192": ("gemm_n192", gemm_n192.build_all),
    "gemm_f32": ("gemm_f32", gemm_f32.build_all),
    "gemm_f32_m96": ("gemm_f32_m96", gemm_f32_m96.build_all),
    "gemm_f32_f64acc": ("gemm_f32_f64acc", gemm_f32_f64acc.build_all),
    "sdpa_model": ("sdpa_model", sdpa_model.build_all),
    "flash_attention": ("flash_attention", flash_attention.build_all),
    "flash_attention_f32": ("flash_attention_f32", flash_attention_f32.build_all),
    "flash_attention_f32_f64acc": ("flash_attention_f32_f64acc", flash_attention_f32_f64acc.build_all),
    "model_ops": ("model_ops", model_ops.build_all),
    "multi_spec": ("multi_spec", multi_spec.build_all),
    "multi_device": ("multi_device", multi_device.build_all),
    "styles": ("styles", styles.build_all),
    "templates": ("templates", templates.build_all),
    "nonconst": ("nonconst", nonconst.build_all),
    "zero_shmem": ("zero_shmem", zero_shmem.build_all),
    "fuzz": ("fuzz", fuzz.build_all),
    "structs": ("structs", structs.build_all),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.artifacts",
        description="Builds the modules the GPU tests (and the benchmarks) load, on a machine with the compiler. Carry OUT to the GPU machine, "
                    "where the tests read it ($IREE_DISPATCH_PREBUILT, default build/gpu-tests).",
        epilog="The fuzz group has options of its own: python -m tests.support.artifacts.fuzz --help")
    parser.add_argument("out", nargs="?", type=Path, default=ROOT / "build" / "gpu-tests", metavar="OUT", help="output folder (default: build/gpu-tests)")
    parser.add_argument("--only", action="append", choices=list(GROUPS), metavar="GROUP",
                        help=f"build only this group (repeatable; default: all of {', '.join(GROUPS)})")
    args = parser.parse_args(argv)
    for group in args.only or GROUPS:
        folder, build_all = GROUPS[group]
        for name, path in build_all(args.out / folder).items():
            print(f"{f'{folder}/' if folder else ''}{name}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
