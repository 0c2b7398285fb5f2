"""A program's transient storage as one module global, allocated once, so that IREE records its
command buffer once.

IREE gives each call's intermediate values (the transients) a buffer it allocates at the call
and frees after it. The command buffer that runs the call's dispatches binds that buffer, so
IREE records all the dispatches again at every call, and the call's output fence waits for the
deallocation, a queue operation of its own after the last kernel. A program that routes its
results through `hal.tensor.transients ... from` a load of the global STORAGE_GLOBAL (declared
only: models/transients.py writes that) gets the storage from the global instead. The
size is known only once IREE has planned the allocations, at the end of its stream phase:
`compile.run_iree_compile` stops there, and `allocate_storage` completes the IR:

- an initializer that allocates the global on the device at the largest size any function needs
  (IREE's reflection `iree.abi.transients.size.constant`), run once when the module loads,
  before the initializers in which IREE records the command buffers that bind it;
- the storage's length as that constant where IREE reads it from the buffer. With the buffer an
  immutable global and its length a constant, IREE records the command buffer in its own
  initializer instead of at every call.

Calls then share the storage. They run one after another on the device's queue, so they never
use it at the same time; a program over several devices is refused.

The compiled file gets the same initializer (`with_allocation`), so that it compiles with plain
iree-compile too (which records the command buffer at each call, as the length stays the
buffer's).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..core.errors import CompileError

STORAGE_GLOBAL = "__iree_dispatch_transients"
DECLARATION = f"util.global private @{STORAGE_GLOBAL} : !hal.buffer"

_CONSTANT_SIZE = re.compile(r"iree\.abi\.transients\.size\.constant = (\d+) : index")
_SIZED = re.compile(r"iree\.abi\.transients\.size = @")
_AFFINITY = re.compile(r"#hal\.device\.affinity<@([\w$.-]+)")
_LOAD = re.compile(rf"(%[\w$.-]+) = util\.global\.load immutable @{STORAGE_GLOBAL} : !hal\.buffer")
_STORE = re.compile(rf"util\.global\.store %[\w$.-]+, @{STORAGE_GLOBAL} :")
# The memory type and usage IREE's own transient allocations have: its calls assert them.
_INITIALIZER = """\
  util.initializer {{
    %default_device = arith.constant 0 : index
    %device = hal.devices.get %default_device : !hal.device
    %allocator = hal.device.allocator<%device : !hal.device> : !hal.allocator
    %any_queue = arith.constant -1 : i64
    %size = arith.constant {size} : index
    %memory_type = hal.memory_type<"DeviceVisible|DeviceLocal"> : i32
    %usage = hal.buffer_usage<"TransferSource|TransferTarget|Transfer|DispatchStorageRead|DispatchStorageWrite|DispatchStorage"> : i32
    %storage = hal.allocator.allocate<%allocator : !hal.allocator> affinity(%any_queue) type(%memory_type) usage(%usage) : !hal.buffer{{%size}}
    util.global.store %storage, @{name} : !hal.buffer
    util.return
  }}
"""


def declares_storage(mlir: Path) -> bool:
    """Whether the module in the file `mlir` declares the storage global. Reads the file only up
    to its dialect resources (a model's inline weights, hundreds of MB), line by line."""
    with mlir.open(encoding="utf-8") as f:
        for line in f:
            if line.startswith("{-#"):
                return False
            if DECLARATION in line:
                return True
    return False


def stores_storage(mlir_text: str) -> bool:
    """Whether the module allocates the storage itself (a file `with_allocation` wrote)."""
    return _STORE.search(_split_resources(mlir_text)[0]) is not None


def allocate_storage(stream_text: str) -> tuple[str, int | None]:
    """The stream-phase IR of a program that declares the storage global, with the global
    allocated (unless the program allocates it itself) and its length a constant (the module
    docstring says why), and that size; None where IREE placed no transients in it."""
    body, resources = _split_resources(stream_text)
    loads = set(_LOAD.findall(body))
    if not loads:
        return stream_text, None
    sizes = [int(s) for s in _CONSTANT_SIZE.findall(body)]
    if not _SIZED.search(body):
        raise CompileError("IREE's stream phase states no transient size for the program's functions (a bug in iree_dispatch, please report it)")
    if len(sizes) != len(_SIZED.findall(body)):
        raise CompileError("a function of the program needs transient storage of a size known only at the call; compile it without the storage global")
    if len(set(_AFFINITY.findall(body))) > 1:
        raise CompileError("transient storage in a module global is for a program on one device; this one names several")
    size = max(sizes)
    names = "|".join(re.escape(name) for name in sorted(loads))
    body, replaced = re.subn(rf"(%[\w$.-]+) = hal\.buffer\.length<(?:{names}) : !hal\.buffer> : index", rf"\1 = arith.constant {size} : index", body)
    if not replaced:
        raise CompileError("IREE's stream phase reads no length of the transient storage: this IREE version places transients differently "
                           "(a bug in iree_dispatch, please report it)")
    # A program that allocates the storage itself (compiled from an emitted file) keeps its own;
    # the calls' checks of the buffer's length against the size stay.
    text = body + resources
    return (text if stores_storage(body) else with_allocation(text, size)), size


def with_allocation(mlir_text: str, size: int) -> str:
    """`mlir_text` (a module at the input level or IREE's stream phase) with an initializer that
    allocates the storage at `size` bytes on the default device, right after the storage's
    declaration. Initializers run in the module's order: this one after the devices' (IREE puts
    them first) and before any that records a command buffer binding the storage (IREE puts
    those just before the function whose command buffer it is)."""
    body, resources = _split_resources(mlir_text)
    declaration = re.search(rf"^  {re.escape(DECLARATION)}.*\n", body, re.MULTILINE)
    if declaration is None:
        raise CompileError("the program's IR has no top-level declaration of the transient storage (a bug in iree_dispatch, please report it)")
    at = declaration.end()
    # At least a byte: IREE may keep the storage bound where every function's transients fit in none.
    return body[:at] + _INITIALIZER.format(size=max(size, 1), name=STORAGE_GLOBAL) + body[at:] + resources


def _split_resources(text: str) -> tuple[str, str]:
    """The module, and the dialect resources printed after it (a model's inline weights), which
    no search here need read."""
    split = text.find("\n{-#")
    return (text, "") if split < 0 else (text[:split], text[split:])
