"""Every ``Example::`` in the package runs in the suite: ``doctest.testmod`` on each module whose source holds a
``>>>`` line (issue 40: a changed default, e.g. ``WSDLambda``'s ``decay_shape``, went unnoticed while the schedules'
examples ran nowhere). A module that gains an example is picked up by the scan below; one whose examples stop being
found (a docstring doctest cannot see) fails ``attempted > 0``."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import lightning_sparkling

PACKAGE = Path(lightning_sparkling.__file__).parent


def _modules_with_examples() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ">>> " not in path.read_text(encoding="utf-8"):
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


MODULES = _modules_with_examples()


def test_the_scan_finds_the_documented_modules():
    assert {"lightning_sparkling.growth.schedules", "lightning_sparkling.growth.stage",
            "lightning_sparkling.growth.record", "lightning_sparkling.growth.axes"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_examples_hold(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an example that writes files writes them here
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, report=False)
    assert result.attempted > 0, f"{name}: a '>>> ' line in its source, but no example doctest can find"
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed (run python -m " \
                               f"doctest -v {name.replace('.', '/')}.py for the diff)"
