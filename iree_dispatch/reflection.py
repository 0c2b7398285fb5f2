"""The contract between the build half and the run-time half: where a generated function's
kernel description lives in the vmfb (an `iree.reflection` entry, as compact JSON)."""

from __future__ import annotations

import json

REFLECTION_KEY = "iree_dispatch.kernel"


def encode(description: dict) -> str:
    return json.dumps(description, sort_keys=True, separators=(",", ":"))


def decode(text: str) -> dict:
    return json.loads(text)
