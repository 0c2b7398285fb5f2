"""`iree-dispatch compile MODEL.mlir --kernels SPEC.toml|FOLDER [...] -o MODEL.vmfb [--dry-run]`.

Registered by the main command line with `add_compile_command(sub)`.
"""

from __future__ import annotations

import sys


def add_compile_command(sub) -> None:
    c = sub.add_parser("compile", help="an imported model (.mlir) -> .vmfb, its ops replaced by kernels that declare they can replace them")
    c.add_argument("model", help="the model as MLIR: torch dialect (torch.export + IREE's FX importer) or linalg on tensors")
    c.add_argument("--kernels", action="append", required=True, metavar="SPEC",
                   help="kernel spec (.toml) whose [[kernel]] tables say what they replace, or a folder: every spec in it that declares replacements, "
                        "by name (kernels/ is the kernel library; repeatable)")
    c.add_argument("-o", "--output", help="output .vmfb (needed unless --dry-run)")
    c.add_argument("--dry-run", action="store_true", help="only report what would be replaced and why the rest is not; write nothing")
    c.add_argument("--allow-wider-accumulation", action="store_true",
                   help="accept kernels that accumulate in a wider type than the model (f32 for a bf16 LayerNorm or matmul, "
                        "or a bf16 matmul + bias + GELU that the model rounds between steps), narrowing their results")
    c.add_argument("--per-call-transients", action="store_true",
                   help="leave the calls' intermediate values to IREE's allocation at each call, instead of one storage allocated when the module loads "
                        "(less memory held between calls; each call records its command buffer again)")
    c.add_argument("--report-json", metavar="PATH", help="also write the report as JSON")
    c.add_argument("--program", metavar="PATH", help="also keep the rewritten model (the program calling the kernels) there")
    c.add_argument("--emit-mlir", metavar="PATH", help="also keep the linked MLIR (model + kernels), with the objects it refers to in <module>.objects/ beside it")
    c.add_argument("--no-cache", action="store_true", help="build from scratch, neither reading nor writing the build cache")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    c.set_defaults(func=run_compile)


def run_compile(args) -> int:
    from .compiler import compile_model

    def progress(message: str) -> None:
        if not args.quiet:
            print(f"[iree-dispatch] {message}", file=sys.stderr, flush=True)

    report = compile_model(
        args.model,
        args.kernels,
        args.output,
        dry_run=args.dry_run,
        allow_wider_accumulation=args.allow_wider_accumulation,
        per_call_transients=args.per_call_transients,
        program=args.program,
        emit_mlir=args.emit_mlir,
        report_json=args.report_json,
        progress=progress,
        cache=not args.no_cache,
    )
    sys.stdout.write(report.text())
    return 0
