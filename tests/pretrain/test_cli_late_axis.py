"""Issue 41: the CLI's stage keys are derived when a configuration is read, not when the schema is imported, so an
axis registered after ``lightning_sparkling.pretrain.config.schema`` and ``cli`` were imported has its stage key
accepted by ``sparkling pretrain`` / ``plan`` (a configuration file, ``--growth.stages.K.KEY``, a ``StageArgs``
instance), and unregistering it takes the key away again."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from lightning_sparkling.growth.axes import BaseAxis, register_axis, registered_axes, unregister_axis
from lightning_sparkling.growth.stage import GrowthStage, StageError
from lightning_sparkling.growth.types import AxisPlan
from lightning_sparkling.pretrain import cli  # imported before the toy axis registers
from lightning_sparkling.pretrain.config import resolve, schema
from lightning_sparkling.pretrain.cli import parse

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"


@dataclasses.dataclass(frozen=True)
class _SpinKeys:
    """The toy axis' stage key: ``spin``, a positive integer its plan records."""

    spin: int | None = None


class _Spin(BaseAxis):
    """A toy axis with a stage key of its own (``spin``), registered late (after the CLI was imported)."""

    name = "spin"
    stage_keys = _SpinKeys

    def active(self, stage) -> bool:
        return stage.get("spin") is not None

    def check_stage(self, stage) -> None:
        spin = stage.get("spin")
        if spin is not None and not (isinstance(spin, int) and spin > 0):
            raise StageError(f"GrowthStage(spin={spin!r}): must be a positive integer", key="spin")

    def config_values(self, config, stage):  # a growth that changes nothing is refused: it names the config
        return {"name": f"{config.name}-spin{stage.get('spin')}"}

    def plan(self, ctx):
        return AxisPlan(change=("spin", ctx.stage.get("spin")))


def _config_with_spin(tmp_path: Path) -> str:
    raw = yaml.safe_load(QUICKSTART.read_text())
    raw["growth"]["stages"][0]["spin"] = 2
    path = tmp_path / "spin.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _refused(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as info:
        parse(argv)
    assert info.value.code == 2
    return capsys.readouterr().err


def test_an_axis_registered_after_the_cli_has_its_stage_key_in_the_cli(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # check_out_dir looks at out/quickstart: a fresh folder
    path = _config_with_spin(tmp_path)
    assert "spin" not in {f.name for f in dataclasses.fields(schema.StageArgs)}
    assert "growth.stages[0].spin: unknown key" in _refused(capsys, ["--config", path])
    assert "growth.stages[0].spin: unknown key" in _refused(
        capsys, ["--config", str(QUICKSTART), "--growth.stages.0.spin", "3"])

    toy = register_axis(_Spin())
    try:
        assert "spin" in {f.name for f in dataclasses.fields(schema.StageArgs)}  # the attribute follows the registry
        assert schema.StageArgs is schema.stage_args()  # derived once per set of keys
        _, run, dumped = parse(["--config", path])  # the configuration file's key
        (stage,) = run.stages
        assert stage.get("spin") == 2 and isinstance(stage, GrowthStage) and "spin: 2" in dumped
        _, run, dumped = parse(["--config", str(QUICKSTART), "--growth.stages.0.spin", "3"])  # one key from argv
        assert run.stages[0].get("spin") == 3 and "spin: 3" in dumped
        assert "spin=-1" in _refused(capsys, ["--config", path, "--growth.stages.0.spin", "-1"])  # its check runs
        ns, _, _ = parse(["--config", str(QUICKSTART)])
        ns.growth = schema.GrowthArgs(stages=[schema.StageArgs(at_step=100, n_embd=128, rewarmup_steps=20, spin=4)])
        assert resolve.resolve(ns).stages[0].get("spin") == 4  # a StageArgs instance with the late key
        assert cli.main(["plan", "--config", path]) == 0
        capsys.readouterr()
    finally:
        unregister_axis(toy)
    assert "spin" not in [a.name for a in registered_axes()]
    assert "spin" not in {f.name for f in dataclasses.fields(schema.StageArgs)}
    assert "growth.stages[0].spin: unknown key" in _refused(capsys, ["--config", path])
    _, run, _ = parse(["--config", str(QUICKSTART)])  # the built-in keys as before
    assert run.stages[0].n_embd == 128
