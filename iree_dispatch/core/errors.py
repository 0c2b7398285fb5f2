"""Error types. Every failure a user can cause is one of these, with a message that names the
file, line and kernel involved and says what to do."""

from __future__ import annotations


class DispatchError(Exception):
    """Base class of every error iree_dispatch raises on purpose."""


class SpecError(DispatchError, ValueError):
    """The kernel declaration (Python API or spec file) is invalid."""


class SignatureError(DispatchError, ValueError):
    """A kernel's C signature can't be read or can't be mapped to the IREE ABI."""


class ToolchainError(DispatchError):
    """nvcc is missing or failed; the message carries its log."""


class AbiError(DispatchError):
    """The compiled PTX entry does not match the declared kernel."""


class CompileError(DispatchError):
    """Emitted IR did not parse, or iree-compile failed."""


class DeviceError(DispatchError, RuntimeError):
    """No usable CUDA device, or no variant in the module can run on it."""


class OutputError(DispatchError, ValueError):
    """An output can't be written where asked, or would overwrite an input or another output."""


class ContractError(DispatchError):
    """A module's descriptions were written by another iree_dispatch version (another build↔run
    contract), or are damaged: the module must be rebuilt with this version."""
