"""The compiled launch extension (iree_dispatch/runtime/_launch.c), built at install.

Optional: an install without a C compiler or Python's headers still succeeds, and the runtime
then compiles it at first use or launches through ctypes (iree_dispatch/runtime/compiled.py).
Everything else about the package is in pyproject.toml.
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "iree_dispatch/runtime/_launch.c"
# The digest the runtime checks before using the installed extension (compiled.source_digest).
DIGEST = hashlib.sha256((Path(__file__).parent / SOURCE).read_bytes()).hexdigest()[:16]

setup(ext_modules=[Extension("iree_dispatch.runtime._launch", [SOURCE], define_macros=[("LAUNCH_SOURCE_DIGEST", f'"{DIGEST}"')],
                             extra_compile_args=["-O2"], optional=True)])
