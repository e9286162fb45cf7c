"""Issue 53: a Lightning user configures growth in a ``LightningCLI`` Trainer YAML, the stages as plain mappings
(``python run.py fit --config cfg.yaml``; the README's YAML, run as shown). The regression: ``GrowthStage`` hid its
signature from jsonargparse and the run exited 2 with ``Key 'at_step' is not expected``. Run in-process on a tiny
litgpt ``GPT``: it grows width, then depth, and the stages keep ``recipe: auto`` until the callback resolves it at
fit start."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
import yaml
from lightning.pytorch.cli import LightningCLI
from litgpt import GPT, Config

from lightning_sparkling import GrowthCallback

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_yaml() -> str:
    """The README's LightningCLI Trainer YAML (the issue's), as shown: it fits the model below (n_embd 32 -> 64,
    intermediate_size 64 -> 256, then n_layer 2 -> 4)."""
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    (block,) = [b for b in blocks if "class_path: lightning_sparkling.WidthGrowthCallback" in b]
    return block

TRAINER = {"max_steps": 26, "accelerator": "cpu", "devices": 1, "logger": False, "enable_checkpointing": False,
           "enable_progress_bar": False, "enable_model_summary": False}


class TinyLM(pl.LightningModule):
    """A tiny litgpt ``GPT`` (2 blocks, n_embd 32) trained on next-token prediction."""

    def __init__(self) -> None:
        super().__init__()
        self.model = GPT(Config(n_layer=2, n_embd=32, n_head=4, block_size=16, vocab_size=64, padded_vocab_size=64,
                                bias=False, mlp_class_name="LLaMAMLP", intermediate_size=64,
                                norm_class_name="RMSNorm"))

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        x = batch[0]
        logits = self.model(x[:, :-1])
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class TinyData(pl.LightningDataModule):
    def train_dataloader(self) -> torch.utils.data.DataLoader:
        x = torch.randint(0, 64, (64, 17), generator=torch.Generator().manual_seed(0))
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=8)


class RecordingCLI(LightningCLI):
    """``LightningCLI`` that keeps the growth callback's stages as the YAML built them, before ``fit``."""

    def before_fit(self) -> None:
        (self.growth,) = [c for c in self.trainer.callbacks if isinstance(c, GrowthCallback)]
        self.built = self.growth.stages


@pytest.mark.parametrize("name", ["GrowthCallback", "WidthGrowthCallback"])
def test_lightning_cli_trains_and_grows_from_a_trainer_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            name: str) -> None:
    monkeypatch.setattr(sys, "argv", ["run.py"])  # as `python run.py fit --config cfg.yaml`: args= holds the rest
    config = yaml.safe_load(readme_yaml().replace(".WidthGrowthCallback", f".{name}"))
    assert config["trainer"]["callbacks"][0]["init_args"]["stages"] == [
        {"at_step": 10, "n_embd": 64, "intermediate_size": 256, "rewarmup_steps": 5},
        {"at_step": 20, "n_layer": 4, "rewarmup_steps": 5}]
    config["trainer"].update(TRAINER, default_root_dir=str(tmp_path))
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    cli = RecordingCLI(TinyLM, TinyData, args=["fit", "--config", str(path), "--seed_everything", "0"],
                       save_config_kwargs={"overwrite": True})

    width, depth = cli.built  # as the YAML built them: recipe auto, its keys not set yet
    assert (width.recipe, width.unresolved_keys) == ("auto", ("init", "rewarmup_ratio"))
    assert width.given_keys == {"at_step", "n_embd", "intermediate_size", "rewarmup_steps"}
    assert (depth.recipe, depth.given_keys) == ("auto", {"at_step", "n_layer", "rewarmup_steps"})
    grown_width, grown_depth = cli.growth.stages  # resolved at fit start (no scheduler: cosine)
    assert (grown_width.recipe, grown_width.init, grown_width.rewarmup_ratio) == ("random-zero-3x", "random-zero", 3.0)
    assert (grown_depth.recipe, grown_depth.init, grown_depth.rewarmup_ratio) == ("random-zero-3x", "copy-copy", 1.3)
    assert [s["recipe"].split(" ")[0] for s in cli.growth.summaries] == ["random-zero-3x", "random-zero-3x"]

    assert cli.trainer.global_step == 26 and cli.growth.grown_stages == 2
    model = cli.model.model
    config = model.config
    assert (config.n_embd, config.intermediate_size, config.n_layer) == (64, 256, 4)
    assert len(model.transformer.h) == 4
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert shapes["transformer.wte.weight"] == shapes["lm_head.weight"] == (64, 64)
    for block in range(4):
        assert shapes[f"transformer.h.{block}.attn.qkv.weight"] == (3 * 4 * 8, 64)  # same heads, wider input
        assert shapes[f"transformer.h.{block}.attn.proj.weight"] == (64, 4 * 8)
        assert shapes[f"transformer.h.{block}.mlp.fc_1.weight"] == (256, 64)
        assert shapes[f"transformer.h.{block}.mlp.proj.weight"] == (64, 256)
    trained = {id(p) for group in cli.trainer.optimizers[0].param_groups for p in group["params"]}
    assert trained == {id(p) for p in model.parameters()}  # the optimizer trains the grown Parameters

    saved = yaml.safe_load((tmp_path / "config.yaml").read_text(encoding="utf-8"))
    (callback,) = saved["trainer"]["callbacks"]
    assert [sorted(set(s) & {"init", "rewarmup_ratio", "recipe"}) for s in callback["init_args"]["stages"]] == \
        [["recipe"], ["recipe"]]  # the saved config, run again, leaves them to the recipe: still auto
