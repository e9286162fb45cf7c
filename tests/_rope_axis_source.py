"""The source of a toy growth axis with a stage key of its own, ``rope_base`` (a ``litgpt.Config`` field that is not
a shape: it changes the RoPE cache, a buffer derived from the config): the example of docs/ARCHITECTURE.md's "Write
your own axis" guide, read from the page (the block after its ``<!-- example: my_rope_axis.py`` marker), so the
suite runs the very code the guide shows. The tests (``tests/growth/test_toy_axis.py``,
``tests/pretrain/test_cli_plugins.py``, ``tests/pretrain/test_axis_guide.py``, the traps' tests) write it into a
module on ``PYTHONPATH``: one module, one registration."""

from __future__ import annotations

import re
from pathlib import Path

ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md"


def guide_example(marker: str = "<!-- example: my_rope_axis.py") -> str:
    """The ``python`` block that follows ``marker`` in docs/ARCHITECTURE.md."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    after = text.split(marker, 1)[1]
    match = re.search(r"```python\n(.*?)\n```", after, re.S)
    assert match is not None, f"docs/ARCHITECTURE.md: no ```python block after {marker!r}"
    return match.group(1) + "\n"


ROPE_AXIS = guide_example()
