"""``check_resume_checkpoint`` at the boundary of a stage's ``at_step``: a checkpoint not grown by the next stage is
accepted up to ``at_step`` optimizer steps (resumed, the stage grows before step ``at_step + 1``, on time) and
refused from ``at_step + 1`` on (resumed, the growth would come late).

The oracle is what resuming each checkpoint does: real Lightning checkpoints of a tiny run, taken after every step,
are resumed with the growth callback, and the step whose update first runs on the grown model is read from the
parameters' shapes."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_sparkling import GrowthStage, WidthGrowthCallback
from lightning_sparkling.pretrain.errors import ConfigError
from lightning_sparkling.pretrain.config.resume import check_resume_checkpoint

from _measure import RecordSteps
from _tiny import TinyModule, make_trainer, tiny_config

MAX_STEPS = 8
MLP = "transformer.h.0.mlp.fc_1.weight"
EMBD = "transformer.wte.weight"


def _stage0(at_step: int) -> GrowthStage:
    return GrowthStage(at_step, intermediate_size=96, rewarmup_steps=2, recipe="paper")  # as a CLI run resolves it


def _stage1(at_step: int) -> GrowthStage:
    return GrowthStage(at_step, n_embd=48, rewarmup_steps=2, recipe="paper")


def _run(root: Path, stages: list[GrowthStage], max_steps: int, resume: Path | None = None,
         ckpt_every: int | None = None) -> RecordSteps:
    module = TinyModule(optimizer="sgd", lr=0.05, max_steps=MAX_STEPS)
    recorder = RecordSteps()
    callbacks = [recorder]
    if stages:
        callbacks.append(WidthGrowthCallback(stages, symmetry_every_n_steps=0))
    if ckpt_every:
        callbacks.append(ModelCheckpoint(dirpath=root, every_n_train_steps=ckpt_every, save_top_k=-1,
                                         filename="{step}"))
    trainer = make_trainer(callbacks, max_steps=max_steps, enable_checkpointing=bool(ckpt_every),
                           default_root_dir=root)
    trainer.fit(module, ckpt_path=str(resume) if resume else None)
    return recorder


def _first_step_on(recorder: RecordSteps, name: str, rows: int) -> int:
    """The global step of the first optimizer step whose update ran on a tensor ``name`` of ``rows`` rows."""
    return min(r["step"] for r in recorder.records if r["before"][name].shape[0] == rows)


def _accepted(ckpt: Path, stages: list[GrowthStage]) -> bool:
    try:
        check_resume_checkpoint(ckpt, tiny_config(), stages, tie_embeddings=False, num_optimizers=1)
    except ConfigError as err:
        assert "was not grown by growth.stages" in str(err) and "would happen late" in str(err), err
        return False
    return True


@pytest.fixture(scope="module")
def plain_checkpoints(tmp_path_factory) -> Path:
    """A run without growth, checkpointed after every optimizer step 1..6."""
    root = tmp_path_factory.mktemp("plain")
    _run(root, [], max_steps=6, ckpt_every=1)
    return root


@pytest.fixture(scope="module")
def grown_checkpoints(tmp_path_factory) -> Path:
    """A run grown by stage 0 (MLP, at step 2), checkpointed after every optimizer step 1..7."""
    root = tmp_path_factory.mktemp("grown")
    _run(root, [_stage0(2)], max_steps=7, ckpt_every=1)
    return root


@pytest.mark.parametrize("step", [2, 3, 4, 5, 6])
def test_checkpoint_not_grown_by_the_first_stage_is_accepted_up_to_its_at_step(plain_checkpoints, tmp_path, step):
    """Stage at step 4: an ungrown checkpoint at step 2, 3 or 4 is accepted (resumed, the MLP first trains grown at
    step 4), at step 5 or 6 refused (resumed, it would first train grown at step 5 or 6)."""
    at = 4
    ckpt = plain_checkpoints / f"step={step}.ckpt"
    assert ckpt.is_file(), sorted(p.name for p in plain_checkpoints.iterdir())
    resumed = _run(tmp_path, [_stage0(at)], max_steps=MAX_STEPS, resume=ckpt)
    assert resumed.records[0]["step"] == step
    grown_at = _first_step_on(resumed, MLP, 96)
    assert grown_at == max(step, at)
    assert _accepted(ckpt, [_stage0(at)]) == (grown_at == at), (step, grown_at)
    assert _accepted(ckpt, [_stage0(at)]) == (step <= at)


@pytest.mark.parametrize("step", [3, 4, 5, 6])
def test_checkpoint_grown_by_stage_0_not_by_stage_1_is_accepted_up_to_stage_1s_at_step(grown_checkpoints, tmp_path,
                                                                                      step):
    """Stage 0 grew the MLP at step 2; stage 1 (n_embd) at step 4: the checkpoint at step 3 or 4 is accepted
    (resumed, n_embd first trains grown at step 4), at step 5 or 6 refused."""
    at = 4
    stages = [_stage0(2), _stage1(at)]
    ckpt = grown_checkpoints / f"step={step}.ckpt"
    assert ckpt.is_file(), sorted(p.name for p in grown_checkpoints.iterdir())
    resumed = _run(tmp_path, stages, max_steps=MAX_STEPS, resume=ckpt)
    assert resumed.records[0]["before"][MLP].shape[0] == 96  # the checkpoint was grown by stage 0
    grown_at = min(r["step"] for r in resumed.records if r["before"][EMBD].shape[1] == 48)
    assert grown_at == max(step, at)
    assert _accepted(ckpt, stages) == (grown_at == at), (step, grown_at)
    assert _accepted(ckpt, stages) == (step <= at)
