"""Every row of the bad-input matrix raises our error (never a dependency's), and
docs/errors.md quotes exactly what users see today."""

import pytest

from iree_dispatch.core.errors import DispatchError

from ..support.environment import ROOT, needs_build_tools
from ..support.error_matrix import CASES, markdown, message


@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=needs_build_tools if c.needs_build_tools else (), id=c.title) for c in CASES]
)
def test_bad_input(case):
    text = message(case)
    assert text and "Traceback" not in text
    if case.error is DispatchError:
        assert "<dir>" in text, "build errors name the file involved"


def test_matrix_has_at_least_25_rows():
    assert len(CASES) >= 25


@needs_build_tools
def test_docs_quote_the_current_messages():
    assert (ROOT / "docs" / "errors.md").read_text() == markdown(), "regenerate: python -m tests.support.error_matrix > docs/errors.md"
