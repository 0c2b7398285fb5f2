"""The build half, end to end: ModuleSpec → PTX per arch → ABI check → MLIR → .vmfb.

Everything is produced in a private temporary folder beside the output and moved into place
only when every stage succeeded (core/files.Staging), so a failed build leaves no partial
artifact, and a concurrent reader never sees a half-written file. Before anything is written,
every output is checked (core/files.check_outputs): writable, not a folder, not an input, not
another output.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import __version__
from ..core.archs import Arch
from ..core.errors import AbiError, SpecError, ToolchainError
from ..core.files import Staging, check_outputs, quoted_includes, write_atomic
from ..core.variants import Variant
from ..frontend.spec import KernelSpec, ModuleSpec
from ..frontend.triton import compile_module as compile_triton_kernels
from ..frontend.triton import compile_triton
from ..toolchains import PtxObject, Toolchain, object_filename, select_toolchain
from .abi import check_adapted, check_entry, check_machine_code, resolve_entry
from .cache import ENTRY_FILES, ENTRY_META, OBJECTS, Cache, CacheError, digest, file_digest, package_digest
from .compile import check_iree_compile_flags, compile_flags, compile_vmfb, iree_compiler_version, link_program, parse_check, target_devices
from .emit import CompiledObjects, emit_module, executable_symbols
from .ptx_adapt import adapt_module
from .ptx_roles import PtxEvidence, decide_roles, pointer_uses

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BuildOptions:
    """What, beyond the specs and sources, decides the artifacts' bytes."""

    embed_objects: bool = False  # object bytes inside the emitted IR (compiles with plain iree-compile)
    asynchronous: bool = False  # iree-compile --iree-execution-model=async-external
    strip_assertions: bool = False  # iree-compile --iree-opt-strip-assertions
    iree_compile_flags: tuple[str, ...] = ()  # the user's own iree-compile flags, after ours (compile.check_iree_compile_flags)

    def __post_init__(self) -> None:
        flags = self.iree_compile_flags
        if isinstance(flags, str):
            raise SpecError(f"iree_compile_flags must be a sequence of flags, not the string {flags!r}: write ({flags!r},)")
        object.__setattr__(self, "iree_compile_flags", tuple(flags))
        check_iree_compile_flags(self.iree_compile_flags)

    def fingerprint(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @property
    def compile_options(self) -> dict[str, object]:
        """The iree-compile options (compile.compile_flags)."""
        return {"asynchronous": self.asynchronous, "strip_assertions": self.strip_assertions, "extra_flags": self.iree_compile_flags}


@dataclass(frozen=True)
class BuildResult:
    vmfb: Path
    mlir: Path | None  # the emitted (or linked) IR, if asked for
    objects_dir: Path | None  # the objects the IR refers to (the first module's, when a program links several); None when not kept
    timings: dict[str, float]  # seconds per stage
    dependencies: tuple[Path, ...]  # every file read, absolute: sources, the headers they include, the program
    objects_dirs: tuple[Path, ...] = ()  # every module's objects folder, in the order the specs were given (none when not kept)


def objects_dirname(module_name: str) -> str:
    return f"{module_name}.objects"


def build(
    spec: ModuleSpec | Sequence[ModuleSpec],
    output: str | Path,
    *,
    emit_mlir: str | Path | None = None,
    program: str | Path | None = None,
    embed_objects: bool = False,
    asynchronous: bool = False,
    strip_assertions: bool = False,
    iree_compile_flags: Sequence[str] = (),
    progress: Progress | None = None,
    cache: Cache | bool = True,
    toolchain: str | Toolchain | None = None,
    program_as: str | Path | None = None,
    keep_objects: bool = True,
) -> BuildResult:
    """Builds `spec` into the .vmfb `output`.

    spec: one ModuleSpec, or several for a `program` that calls kernels of several modules
    (`@<moduleA>.<kernel>` and `@<moduleB>.<kernel>`): each module keeps its name and its own
    objects folder; module names must differ.
    emit_mlir: also write the IR there (objects go beside it, in `<module>.objects/`, and the
    IR refers to them by that relative path).
    program: an MLIR file whose functions call the kernels through declarations like
    `func.func private @<module>.<kernel>(...)`; it is linked with the kernels and the result
    is what `output` holds.
    embed_objects: write the object bytes into the emitted IR, so it compiles anywhere with
    plain iree-compile (no object files, no search path).
    asynchronous, strip_assertions: iree-compile options, see compile.compile_flags.
    iree_compile_flags: more iree-compile flags, each one `--name` or `--name=value`, passed
    after the build's own (so they win); flags that would break what the build generates (a
    non-CUDA target device, the output, the object search path: compile.DENIED_IREE_COMPILE_FLAGS)
    are refused with a SpecError. They are part of the cache key. CUDA devices named in them
    (`--iree-hal-target-device=gpu0=cuda[0]`, one flag per GPU) make a program over several GPUs:
    each kernel call is placed with `stream.affinity` (compile.link_program).
    cache: reuse and record builds in the build cache (cache.py); False builds from scratch.
    toolchain: "nvcc", "nvrtc", a toolchain.Toolchain, or None for nvcc if one is found, else NVRTC.
    program_as: where `program` will be once its caller moves it into place, when the caller
    staged it in a private folder (models/compiler.py): the cache key names the program by this
    path instead of the staged one, so the next build of the same program finds this one; the
    dependencies then leave the program out.
    keep_objects: place each module's objects folder (`<module>.objects/`, PTX and cubins) beside
    the vmfb, or beside the emitted IR. False places them only where the emitted IR refers to
    them (emit_mlir without embed_objects); otherwise they are intermediates, removed with the
    build's private folder (the command line's `build` and `compile` keep nothing they were not
    asked for).
    """
    specs = _module_specs(spec, program)
    options = BuildOptions(embed_objects, asynchronous, strip_assertions, iree_compile_flags)  # type: ignore[arg-type]  # made a tuple, checked
    devices = target_devices(options.iree_compile_flags)
    if len(devices) > 1 and program is None:
        # A kernel's function names no device: only a program's calls can place them.
        raise SpecError(f"build: {len(devices)} target devices ({', '.join(d.name for d in devices)}) but no program; a --program places each kernel call on one of them")
    output = Path(output).absolute()
    mlir_out = Path(emit_mlir).absolute() if emit_mlir else None
    objects_home = (mlir_out or output).parent
    keep_objects = keep_objects or (mlir_out is not None and not embed_objects)
    say = progress or (lambda _msg: None)
    store = Cache() if cache is True else (cache or None)
    # The vmfb records the compiled file's name in its debug locations: name it as the user sees it.
    compile_name = mlir_out.name if mlir_out else f"{Path(program).stem if program is not None else specs[0].name}.mlir"
    # Nothing is written before every output is known to be writable and no output is an input.
    check_outputs(build_outputs(specs, output, mlir_out, objects=keep_objects), build_inputs(specs, program))
    with Staging(output) as staging:
        tmp = staging.folder
        # Prebuilt objects need no compiler: a module of only those builds without one.
        tc = select_toolchain(toolchain) if any(not k.objects for s in specs for k in s.kernels) else None
        known_as = Path(program_as).absolute() if program_as is not None else None
        manifest_key = _manifest_key(specs, program, options, compile_name, tc, known_as) if store else ""
        with store.lock(manifest_key) if store else contextlib.nullcontext():
            hit = store.find(manifest_key, say) if store else None
            if hit is not None:
                started = time.perf_counter()
                for item in (hit / ENTRY_FILES).iterdir():
                    (shutil.copytree if item.is_dir() else shutil.copyfile)(item, tmp / item.name)
                meta = json.loads((hit / ENTRY_META).read_text())
                dependencies = [Path(d) for d in meta["dependencies"]]
                timings = {"cache": time.perf_counter() - started}
                say(f"{output.name}: up to date (build cache)")
            else:
                timings = {}
                dependencies = _stage(specs, tmp, compile_name, program, options, say, timings, tc, store)
                if known_as is not None:
                    # A staged program is gone after this build (the key holds its bytes): the
                    # cache must not look for it again.
                    dependencies = [d for d in dependencies if d != Path(program).absolute()]
                if store:
                    staged = {name: tmp / name for name in (*(objects_dirname(s.name) for s in specs), compile_name, _STAGED_VMFB)}
                    store.store(manifest_key, dependencies, staged, {"dependencies": [str(d) for d in dependencies]})

        # The headers the sources include are known only now: no output may be one of them either.
        check_outputs(build_outputs(specs, output, mlir_out, objects=keep_objects), [("file the build read", d) for d in dependencies])
        # Every stage passed: move the artifacts into place.
        final_objects = tuple(objects_home / objects_dirname(s.name) for s in specs) if keep_objects else ()
        for s, final in zip(specs, final_objects):
            staging.place(tmp / objects_dirname(s.name), final)
        if mlir_out:
            staging.place(tmp / compile_name, mlir_out)
        staging.place(tmp / _STAGED_VMFB, output)
        staging.commit()
    return BuildResult(output, mlir_out, final_objects[0] if final_objects else None, timings, tuple(dependencies), final_objects)


_STAGED_VMFB = "module.vmfb"


def _module_specs(spec: ModuleSpec | Sequence[ModuleSpec], program: str | Path | None) -> tuple[ModuleSpec, ...]:
    """`spec` as a tuple of modules, checked: one module, or several linked into one program."""
    specs = (spec,) if isinstance(spec, ModuleSpec) else tuple(spec)
    if not specs:
        raise SpecError("build: no module spec given")
    if len(specs) > 1 and program is None:
        # Without a program, each module is its own vmfb (its functions are named by kernel
        # alone, so two modules could clash): several specs only make sense linked into one.
        raise SpecError(f"build: {len(specs)} module specs ({', '.join(s.name for s in specs)}) but no program; several specs build one --program that calls their kernels")
    names = [s.name for s in specs]
    clashes = sorted({n for n in names if names.count(n) > 1})
    if clashes:
        raise SpecError(
            f"build: module name {', '.join(clashes)} given by more than one spec; a program calls @<module>.<kernel>, so every module needs its own name "
            "(rename one in its spec's [module] name)"
        )
    return specs


def codegen_arch(specs: Sequence[ModuleSpec]) -> Arch:
    """The arch IREE generates a program's own ops for: the oldest arch of any module, whose PTX
    the driver JIT-compiles forward for newer GPUs (archs are kept newest first)."""
    return min((s.archs[-1] for s in specs), key=lambda a: (a.major, a.minor))


def _manifest_key(
    specs: Sequence[ModuleSpec], program: str | Path | None, options: BuildOptions, compile_name: str, tc: Toolchain | None, known_as: Path | None = None,
) -> str:
    """Everything known before building that decides the artifacts' bytes (see cache.py); the
    program by the path it is known as (build's `program_as`) and the bytes it has."""
    parts = [
        f"iree_dispatch {__version__} {package_digest()}",
        f"iree-base-compiler {iree_compiler_version()}",
        f"toolchain {tc.identity() if tc else 'none'}",
        *(s.fingerprint() for s in specs),
        f"{options.fingerprint()} name={compile_name}",
    ]
    parts += [f"{src.absolute()}\0{file_digest(src)}" for s in specs for src in s.sources]
    parts += [f"{o.path.absolute()}\0{file_digest(o.path)}" for s in specs for k in s.kernels for o in k.objects]
    if program is not None:
        parts.append(f"program {known_as or Path(program).absolute()}\0{file_digest(Path(program))}")
    return digest(*parts)


def _stage(
    specs: Sequence[ModuleSpec], tmp: Path, compile_name: str, program, options: BuildOptions, say: Progress, timings: dict[str, float], tc: Toolchain | None,
    store: Cache | None = None,
) -> list[Path]:
    """Runs every stage in `tmp`, leaving each module's objects folder, `compile_name` and the
    vmfb there. Returns every file the build read (sources, included headers, the program).
    store: the cache whose compiled objects the objects stage reuses and adds to."""
    arch = codegen_arch(specs)
    staged = [_stage_objects(spec, tmp, say, timings, tc, store) for spec in specs]
    if program is not None:
        for written, objects in zip(specs, staged):
            _check_program_roles(written, objects.module)

    started = time.perf_counter()
    header = (
        f"Generated by iree_dispatch {__version__} for iree-base-compiler {iree_compiler_version()}; do not edit.\n"
        f"Compile: iree-compile {' '.join(compile_flags(arch, Path('<dir holding ' + ', '.join(objects_dirname(s.name) for s in specs) + '/>')))} <this file>"
    )
    linkables = []
    for objects in staged:
        spec = objects.module
        paths = [path for exe in objects.executables for path in exe.object_paths.values()]
        data = {rel: (tmp / rel).read_bytes() for rel in paths} if options.embed_objects else None
        mlir_text = emit_module(objects, header, object_data=data)
        kernels_mlir = tmp / (compile_name if program is None else f".{spec.name}.kernels.mlir")
        kernels_mlir.write_text(mlir_text, encoding="utf-8")
        parse_check(mlir_text, compile_name)
        if program is not None:
            linkables.append((spec.name, emit_module(objects, for_linking=True, object_data=data), [k.name for k in spec.kernels]))
    to_compile = tmp / compile_name
    if program is not None:
        names = " and ".join(f"module {s.name}" for s in specs)
        say(f"link {Path(program).name} with {names}")
        linked = link_program(Path(program), linkables, target_devices(options.iree_compile_flags))
        to_compile.write_text(f"// {header.splitlines()[0]}\n// Linked from {Path(program).name} and {names}.\n{linked}", encoding="utf-8")
    timings["emit+check"] = time.perf_counter() - started

    started = time.perf_counter()
    say(f"iree-compile {to_compile.name}")
    compile_vmfb(to_compile, tmp / _STAGED_VMFB, arch, **options.compile_options)
    timings["iree-compile"] = time.perf_counter() - started
    dependencies = [d for objects in staged for d in objects.dependencies]
    dependencies += [Path(program).absolute()] if program is not None else []
    return list(dict.fromkeys(dependencies))


def _stage_objects(spec: ModuleSpec, tmp: Path, say: Progress, timings: dict[str, float], tc: Toolchain | None, store: Cache | None = None) -> CompiledObjects:
    """Compiles, checks and adapts one module's objects into `tmp/<module>.objects/`; stage
    times add up over modules. Pending Triton kernels are compiled first (in `tmp/.triton/`),
    and from then on are prebuilt kernels: the CompiledObjects' module is the compiled one."""
    objects_rel = objects_dirname(spec.name)
    (tmp / objects_rel).mkdir()
    read: list[Path] = []  # files the Triton compiles read, for the dependencies
    compiled_here = {k.function for k in spec.kernels if k.pending}
    objects_cache = _ObjectCache(store, tc, say) if store and tc and OBJECT_CACHE else None
    if compiled_here:
        started = time.perf_counter()
        spec, read = compile_triton_kernels(spec, tmp / ".triton" / spec.name, tc, say, objects_cache.triton if objects_cache else None)
        timings["triton"] = timings.get("triton", 0.0) + time.perf_counter() - started
    fresh = {k.source for k in spec.kernels if k.function in compiled_here}  # their objects are this build's own, not inputs
    prebuilt = {k.source: k.objects for k in spec.kernels if k.objects}
    symbols = executable_symbols(spec)
    jobs = [(src, arch, tmp / objects_rel / object_filename(src.stem, arch)) for src in spec.sources if src not in prebuilt for arch in spec.archs]
    started = time.perf_counter()
    # Template kernels are instantiated by the compile itself, so their sources need no added line.
    instances = {src: tuple(k.signature.qualified_name for k in spec.kernels if k.source == src and k.signature.template) for src in spec.sources}
    try:
        objects = _compile_ptx(tc, jobs, spec.nvcc_flags, say, store, instances) if tc and jobs else []
    except ToolchainError as exc:
        raise _instantiation_failure(spec, exc) from None
    if jobs or not tc:  # (a toolchain picked only to assemble Triton's cubins compiled nothing)
        stage = tc.name if tc else "compile"
        timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - started
    # Prebuilt PTX is checked and adapted below exactly like nvcc's; machine code is checked here.
    # kernel name → PTX entry name (mangled for C++ kernels)
    entries: dict[str, str] = {}
    for src, objs in prebuilt.items():
        kernels = [k for k in spec.kernels if k.source == src]
        for obj in objs:
            if obj.kind == "ptx":
                staged = tmp / objects_rel / f"{symbols[src]}.{obj.variant.name}.ptx"
                shutil.copyfile(obj.path, staged)
                objects.append(PtxObject(src, obj.variant.target_arch, staged, () if src in fresh else (obj.path.absolute(),)))
            else:
                for kernel, entry in check_machine_code(kernels, obj).items():
                    if entries.setdefault(kernel, entry) != entry:
                        raise AbiError(f"{obj.path}: kernel {kernel} is named {entry} here but {entries[kernel]} in another object")

    started = time.perf_counter()
    evidence: dict[str, list[PtxEvidence]] = {k.name: [] for k in spec.kernels}
    for o in objects:
        kernels = [k for k in spec.kernels if k.source == o.source]
        text = o.text()
        for kernel in kernels:
            entry = resolve_entry(kernel, text, o.arch.name)
            if entries.setdefault(kernel.name, entry) != entry:
                raise AbiError(f"{kernel.signature.where}: kernel {kernel.name} has entry {entry} for {o.arch.name} but {entries[kernel.name]} for another arch")
            check_entry(kernel, entry, text, o.arch.name)
            if kernel.triton is None:  # (a Triton kernel's C signature declares its outputs)
                evidence[kernel.name].append(PtxEvidence(o.arch.name, pointer_uses(text, entry)))
        adapted = adapt_module(text, kernels, entries, o.arch.name)
        for kernel in kernels:
            check_adapted(kernel, entries[kernel.name], adapted, o.arch.name)
        if adapted != text:
            o.path.write_text(adapted, encoding="utf-8")
    spec = _with_pointer_roles(spec, evidence, say)
    ptx_paths = {(o.source, o.arch): o.path for o in objects}
    paths = {
        (src, variant.name): f"{objects_rel}/{_make_object(variant, src, ptx_paths, tmp / objects_rel, tmp, tc, objects_cache).name}"
        for src in spec.sources
        if src not in prebuilt
        for variant in spec.variants
    }
    for src, objs in prebuilt.items():
        for obj in objs:
            staged = ptx_paths[(src, obj.variant.target_arch)] if obj.kind == "ptx" else tmp / objects_rel / f"{symbols[src]}.{obj.variant.name}.{obj.kind}"
            if obj.kind != "ptx":
                shutil.copyfile(obj.path, staged)
            paths[(src, obj.variant.name)] = f"{objects_rel}/{staged.name}"
    timings["ptxas+checks"] = timings.get("ptxas+checks", 0.0) + time.perf_counter() - started
    dependencies = [d for o in objects for d in o.dependencies] + read
    dependencies += [o.path.absolute() for src, objs in prebuilt.items() if src not in fresh for o in objs]
    return CompiledObjects.of(spec, paths, entries, dependencies)


def _instantiation_failure(spec: ModuleSpec, exc: ToolchainError) -> ToolchainError:
    """A failed compile, said of the kernel whose instantiation the compiler refused (a template
    argument of the wrong kind, `k<float, 2.5>` for an int parameter), when its message names one."""
    refused = next((k for k in spec.kernels if k.signature.template and k.signature.qualified_name in str(exc)), None)
    if refused is None:
        return exc
    declared = ", ".join(str(t) for t in refused.signature.template_params)
    return ToolchainError(
        f"{refused.signature.where}: kernel {refused.name}: the compiler can't instantiate {refused.signature.qualified_name} "
        f"(template <{declared}>); check the template arguments in its name:\n{exc}"
    )


def _with_pointer_roles(spec: ModuleSpec, evidence: dict[str, list[PtxEvidence]], say: Progress) -> ModuleSpec:
    """`spec` with each kernel's undeclared pointer roles read from its PTX, and its declared
    ones checked against it (ptx_roles.py)."""
    kernels = []
    for kernel in spec.kernels:
        decided, lines = decide_roles(kernel, evidence[kernel.name])
        for line in lines:
            say(line)
        kernels.append(decided)
    if all(a is b for a, b in zip(kernels, spec.kernels)):
        return spec  # every role declared: the module as given
    return dataclasses.replace(spec, kernels=tuple(kernels))


_ROLE_WORDS = {"input": ("an input", "readonly"), "output": ("a fresh output", "outputs"), "inplace": ("in place", "inplace")}


def _check_program_roles(written: ModuleSpec, built: ModuleSpec) -> None:
    """A program calls kernels with the roles they had when it was written; a pointer whose role
    the build read from the PTX must still have it, or the program's calls don't fit."""
    for before, after in zip(written.kernels, built.kernels):
        for assumed, found in zip(before.tensors, after.tensors):
            if assumed.role != found.role:
                role, key = _ROLE_WORDS[found.role]
                raise SpecError(
                    f"{after.signature.where}: kernel {after.name}: its PTX shows {found.name!r} is {role}, but the program calls it as "
                    f"{_ROLE_WORDS[assumed.role][0]} (its role until the build reads the PTX); declare it in the kernel's spec "
                    f"({key} = [\"{found.name}\"]) and write the program for that role"
                )


def _make_object(
    variant: Variant, source: Path, ptx_paths: dict[tuple[Path, Arch], Path], objects_dir: Path, scratch: Path, tc: Toolchain, cache: _ObjectCache | None = None
) -> Path:
    """The object `variant` carries for `source`, made from the checked, adapted PTX."""
    target = objects_dir / variant.object_filename(source.stem)
    assemble = cache.assemble_cubin if cache else tc.assemble_cubin
    if variant.kind == "ptx":
        return ptx_paths[(source, variant.target_arch)]
    if variant.kind == "cubin":
        return assemble(ptx_paths[(source, variant.target_arch)], variant.target_arch, target)
    cubins = {a: assemble(ptx_paths[(source, a)], a, scratch / f"{source.stem}.{a.name}.cubin") for a in variant.archs}
    return tc.make_fatbin(cubins, (variant.target_arch, ptx_paths[(source, variant.target_arch)]), target)


# ---- the object cache: compiled objects kept in the build cache (cache.py OBJECTS) ----

OBJECT_CACHE = True  # False: only whole builds are cached (every build that misses compiles everything)
_OBJECT = "object"  # the file name of an object entry's one file


class _ObjectCache:
    """Compiled objects in the build cache, under the same rules as whole builds (cache.py:
    sha256-verified entries, damage is a miss and is replaced). A PTX is keyed by the toolchain,
    the flags, the arch and the source's path and bytes, and by the headers it read (the
    second level, as for builds); a cubin by the toolchain, the arch and the PTX's bytes; a
    Triton kernel's objects (every arch's, with its shared memory) by its TritonSource, its .py
    file's path and bytes, and the files of its module's jit functions. All keys hold this
    package's digest, as build keys do. The cache only saves time: one that can't
    be written is not an error here (the build's own store says so)."""

    def __init__(self, store: Cache, tc: Toolchain, say: Progress):
        self.store, self.tc, self.say = store, tc, say
        self.identity = f"iree_dispatch {__version__} {package_digest()}\0toolchain {tc.identity()}"

    def key(self, kind: str, *parts: str) -> str:
        return digest(f"object {kind}", self.identity, *parts)

    def take(self, key: str, out: Path) -> dict | None:
        """Copies the object of `key` to `out` and returns its meta; None if the cache holds none intact."""
        hit = self.store.find(key, self.say, section=OBJECTS)
        if hit is None:
            return None
        meta = self.store.meta(hit)
        shutil.copyfile(hit / ENTRY_FILES / _OBJECT, out)
        return meta

    def keep(self, key: str, path: Path, dependencies: Sequence[Path] = ()) -> None:
        with contextlib.suppress(CacheError):
            self.store.store(key, list(dependencies), {_OBJECT: path}, {"dependencies": [str(d) for d in dependencies]}, section=OBJECTS)

    def triton(self, kernel: KernelSpec, out: Path, tc: Toolchain | None) -> tuple[KernelSpec, list[Path]]:
        """frontend.triton.compile_triton, the objects (PTX and cubins of every arch) and the
        shared memory taken from the cache when it holds them for this function (its .py file's
        path and bytes, its options, the Triton version), its module's jit files unchanged."""
        source = kernel.triton
        key = self.key("triton", json.dumps(source.fingerprint(), sort_keys=True), str(source.path.absolute()), file_digest(source.path))
        hit = self.store.find(key, self.say, section=OBJECTS)
        if hit is not None:
            meta = self.store.meta(hit)
            shutil.copytree(hit / ENTRY_FILES / _OBJECT, out)
            return kernel.compiled_as([out / name for name in meta["objects"]], meta["shared_memory"]), [Path(d) for d in meta["dependencies"]]
        compiled, read = compile_triton(kernel, out, tc)
        meta = {"objects": [o.path.name for o in compiled.objects], "shared_memory": compiled.shared_memory, "dependencies": [str(d) for d in read]}
        with contextlib.suppress(CacheError):
            self.store.store(key, read, {_OBJECT: out}, meta, section=OBJECTS)
        return compiled, read

    def ptx_key(self, source: Path, arch: Arch, flags: Sequence[str], instances: Sequence[str]) -> str:
        return self.key("ptx", str(source.absolute()), file_digest(source), arch.name, *flags, "\0instances", *instances)

    def assemble_cubin(self, ptx: Path, arch: Arch, out: Path) -> Path:
        key = self.key("cubin", arch.name, file_digest(ptx))
        if self.take(key, out) is not None:
            return out
        made = self.tc.assemble_cubin(ptx, arch, out)
        self.keep(key, made)
        return made


def _compile_ptx(
    tc: Toolchain, jobs: list[tuple[Path, Arch, Path]], flags: tuple[str, ...], say: Progress, store: Cache | None, instances: dict[Path, tuple[str, ...]]
) -> list[PtxObject]:
    """tc.compile_all(jobs, instances=instances), except that a (source, arch) whose PTX the
    object cache holds, compiled by this toolchain with these flags and instantiations from
    these bytes of the source and its headers, is taken from there; what is compiled is added
    to it."""
    if store is None or not OBJECT_CACHE:
        return tc.compile_all(jobs, flags, say, instances)
    cache = _ObjectCache(store, tc, say)
    keys = [cache.ptx_key(source, arch, flags, instances.get(source, ())) for source, arch, _ in jobs]
    found: dict[str, PtxObject] = {}
    for (source, arch, out), key in zip(jobs, keys):
        meta = cache.take(key, out)
        if meta is not None:
            found[key] = PtxObject(source, arch, out, tuple(Path(d) for d in meta["dependencies"]))
    missing = [(job, key) for job, key in zip(jobs, keys) if key not in found]
    compiled = tc.compile_all([job for job, _ in missing], flags, say, instances) if missing else []
    for (_job, key), obj in zip(missing, compiled):
        cache.keep(key, obj.path, obj.dependencies)
        found[key] = obj
    return [found[key] for key in keys]


def write_depfile(path: str | Path, target: Path, prerequisites: Sequence[Path]) -> None:
    """Writes `target: prerequisites` as a Makefile-style depfile, which Ninja and Make read.

    Written to a uniquely named file beside it and renamed into place like the other outputs, so
    a build system that reads it never sees half of one, and concurrent builds never share a
    temporary file.
    """
    path = Path(path).absolute()
    check_outputs([("depfile", path, "file")], ())
    write_atomic(path, (" \\\n  ".join([f"{_make_escape(target)}:", *map(_make_escape, prerequisites)]) + "\n").encode("utf-8"))


def _make_escape(path: Path) -> str:
    # Make and Ninja both read `\ ` as a space, `\#` as '#' and `$$` as '$'.
    return str(path).replace("$", "$$").replace("#", "\\#").replace(" ", "\\ ")


# ---- outputs: what build writes and reads, checked by core/files.check_outputs ----

def build_outputs(specs: Sequence[ModuleSpec], output: Path, mlir_out: Path | None, *, objects: bool = True) -> list[tuple[str, Path, str]]:
    """(what, path, "file" or "folder") for everything `build` writes; objects: with each
    module's objects folder (build's keep_objects)."""
    home = (mlir_out or output).parent
    outputs = [("output", output, "file")] + ([("emit_mlir", mlir_out, "file")] if mlir_out else [])
    return outputs + [(f"module {s.name}'s objects folder", home / objects_dirname(s.name), "folder") for s in specs if objects]


def build_inputs(specs: Sequence[ModuleSpec], program: str | Path | None) -> list[tuple[str, Path]]:
    """(what, path) for every file `build` reads that is known before it runs."""
    inputs = [("kernel source", src) for s in specs for src in s.sources]
    inputs += [("included header", header) for header in quoted_includes(src for s in specs for src in s.sources)]
    inputs += [("prebuilt object", o.path) for s in specs for k in s.kernels for o in k.objects]
    return inputs + ([("program", Path(program))] if program is not None else [])
