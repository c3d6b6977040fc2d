"""The guide's own tests of its adapters pass, against real HTTP servers."""

from __future__ import annotations

import pytest

from tests.unit.test_adapter_guide import GUIDE_MODULES, GUIDE_TESTS


@pytest.mark.parametrize(("module", "name"), GUIDE_TESTS, ids=lambda part: str(part))
def test_the_guides_adapters_pass_the_guides_tests(module: str, name: str) -> None:
    GUIDE_MODULES[module][name]()
