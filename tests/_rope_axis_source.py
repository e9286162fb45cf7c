"""The source of a toy growth axis with a stage key of its own, ``rope_base`` (a ``litgpt.Config`` field that is not
a shape: it changes the RoPE cache, a buffer derived from the config), written into a module on ``PYTHONPATH`` by
the tests (``tests/growth/test_toy_axis.py``, ``tests/pretrain/test_cli_plugins.py``): one module, one
registration."""

ROPE_AXIS = '''
"""A toy growth axis: grow litgpt's ``rope_base`` (one module and one registration)."""
import dataclasses

from lightning_sparkling.growth import BaseAxis, register_axis
from lightning_sparkling.growth.errors import GrowthError, StageError


@dataclasses.dataclass(frozen=True)
class RopeKeys:
    """The axis' stage key: ``rope_base``, the RoPE base after the growth."""

    rope_base: int | None = None


class RopeAxis(BaseAxis):
    name = "rope"
    sizes = ("rope_base",)
    stage_keys = RopeKeys

    def check_stage(self, stage):
        base = stage.get("rope_base")
        if base is not None and (isinstance(base, bool) or not isinstance(base, int) or base <= 0):
            raise StageError(f"GrowthStage(rope_base={base!r}): must be a positive integer", key="rope_base")

    def check_model(self, config, stage):
        if stage.get("rope_base") == config.rope_base:
            raise GrowthError(f"rope_base={config.rope_base} does not change", key="rope_base")

    def config_values(self, config, stage):
        return {"rope_base": stage.get("rope_base")}


ROPE = register_axis(RopeAxis())
'''
