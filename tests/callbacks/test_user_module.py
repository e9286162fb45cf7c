"""The journeys of a Lightning user's own module (``tests/user_module_script.py``: its own byte data, AdamW, its own
warmup-cosine ``LambdaLR``, a litgpt ``GPT``; none of ``_tiny.py``): growth, accumulation with a resume, DDP on 2 ranks,
bf16-mixed with clipping, compile, a partial optimizer, teacher-student and EMA, ``load_from_checkpoint``."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from lightning_sparkling import GrowthCallback, GrowthError, GrowthStage, load_grown_checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _dist import run_script
from user_module_script import MIN_LR, MyModule

SCRIPT = Path(__file__).resolve().parents[1] / "user_module_script.py"
MAX_STEPS = 10


def stage(**keys) -> GrowthStage:
    """The README's width stage, its re-warmup fitted to this short run."""
    return GrowthStage(4, **{"n_embd": 64, "intermediate_size": 128, "rewarmup_steps": 2, **keys})


def trainer(*callbacks: Callback, **kwargs) -> L.Trainer:
    defaults = {"accelerator": "cpu", "devices": 1, "max_steps": MAX_STEPS, "logger": False,
                "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False,
                "deterministic": True}
    return L.Trainer(callbacks=list(callbacks), **{**defaults, **kwargs})


@pytest.fixture
def lightning_log(caplog) -> pytest.LogCaptureFixture:
    """Lightning's ``rank_zero_info`` lines (its ``lightning.pytorch`` logger does not propagate to the root)."""
    logger = logging.getLogger("lightning.pytorch")
    logger.addHandler(caplog.handler)
    caplog.handler.setLevel(logging.INFO)
    yield caplog
    logger.removeHandler(caplog.handler)


def batch_loss(gpt: torch.nn.Module, batch: torch.Tensor) -> float:
    with torch.no_grad():
        return float(F.cross_entropy(gpt(batch[:, :-1]).flatten(0, 1).float(), batch[:, 1:].flatten()))


class LossAt(Callback):
    """The model's loss on the batch of optimizer step ``step``, read at that batch's end."""

    def __init__(self, step: int) -> None:
        self.step, self.loss = step, None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step and self.loss is None:
            self.loss = batch_loss(pl_module.model, batch)


def test_growth_logs_the_loss_before_and_after_on_the_same_batch(lightning_log):
    module = MyModule(max_steps=MAX_STEPS)
    before, after = LossAt(4), LossAt(4)
    growth = GrowthCallback(stage(), min_lr=MIN_LR)
    trainer(before, growth, after).fit(module)
    assert module.model.lm_head.weight.shape == (256, 64) and module.model.config.intermediate_size == 128
    (summary,) = growth.summaries
    assert summary["loss_before"] == pytest.approx(before.loss, abs=1e-6)  # the pre-growth model on that batch
    assert summary["loss_after"] == pytest.approx(after.loss, abs=1e-6)  # the grown one on the same batch
    assert summary["loss_after"] != summary["loss_before"]  # random-zero moves the RMS norms: a jump
    jump = f"{summary['loss_before']:.4f} -> {summary['loss_after']:.4f}"
    assert f"loss (same batch)        {jump}" in lightning_log.text
    assert len(module.losses) == MAX_STEPS and all(torch.isfinite(torch.tensor(module.losses)))


def test_accumulation_2_resumed_after_the_growth_is_bit_exact(tmp_path, lightning_log):
    # precision 32-true (Lightning's default): the resumed run must repeat the uninterrupted one bit for bit, which
    # asks the same kernels in the same precision; bf16-mixed is covered below with its own check
    saver = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=6, save_top_k=-1)
    whole = MyModule(max_steps=MAX_STEPS)
    trainer(GrowthCallback(stage(), min_lr=MIN_LR), saver, accumulate_grad_batches=2,
            enable_checkpointing=True).fit(whole)
    (ckpt,) = tmp_path.glob("*step=6.ckpt")  # after the growth at step 4 (6 steps: the end of epoch 0)
    resumed = MyModule(max_steps=MAX_STEPS)
    assert resumed.model.config.n_embd == 32
    lightning_log.clear()
    trainer(GrowthCallback(stage(), min_lr=MIN_LR), accumulate_grad_batches=2).fit(resumed, ckpt_path=ckpt)
    assert ("the checkpoint was grown by 1 stage(s); regrew the model before loading its weights: n_embd 32 -> 64, "
            "intermediate_size 64 -> 128") in lightning_log.text
    for (name, a), b in zip(whole.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_resume_with_a_changed_stage_is_refused_in_one_line(tmp_path):
    saver = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=6, save_top_k=-1)
    trainer(GrowthCallback(stage(), min_lr=MIN_LR), saver, enable_checkpointing=True).fit(MyModule())
    (ckpt,) = tmp_path.glob("*step=6.ckpt")
    with pytest.raises(GrowthError) as err:
        trainer(GrowthCallback(stage(n_embd=48), min_lr=MIN_LR)).fit(MyModule(), ckpt_path=ckpt)
    message = str(err.value)
    assert "stage 0 n_embd: checkpoint 64, callback 48" in message and "give GrowthCallback the stages" in message
    assert "\n" not in message and "GrowthStage(" not in message and len(message) < 400


@pytest.mark.slow
def test_ddp_on_two_ranks_ends_with_identical_parameters(tmp_path):
    run_script(SCRIPT, str(tmp_path))
    ranks = [torch.load(tmp_path / f"final-rank{r}.pt") for r in (0, 1)]
    assert ranks[0]["lm_head.weight"].shape == (256, 64)
    for name, a in ranks[0].items():
        assert torch.equal(a, ranks[1][name]), name


def test_bf16_mixed_with_clipping_trains_the_new_entries():
    module = MyModule(max_steps=MAX_STEPS)
    trainer(GrowthCallback(stage(), min_lr=MIN_LR), precision="bf16-mixed", gradient_clip_val=0.5).fit(module)
    new_columns = module.model.lm_head.weight[:, 32:]  # random-zero: 0.0 at the growth, trained since
    assert new_columns.abs().sum() > 0 and all(torch.isfinite(torch.tensor(module.losses)))


class CompiledModule(MyModule):
    def configure_model(self) -> None:
        super().configure_model()
        self.model = torch.compile(self.model, backend="eager")


def test_compiled_model_grows():
    module = CompiledModule(max_steps=8)
    growth = GrowthCallback(stage(), min_lr=MIN_LR)
    trainer(growth, max_steps=8).fit(module)
    assert module.model.lm_head.weight.shape == (256, 64) and growth.summaries[0]["compiled"]
    assert len(module.losses) == 8 and all(torch.isfinite(torch.tensor(module.losses)))


def test_an_optimizer_that_leaves_zero_started_entries_untrained_is_refused_before_training():
    module = MyModule(partial=True)  # AdamW(self.model.transformer.parameters()): lm_head in no optimizer
    start = {n: p.detach().clone() for n, p in module.model.named_parameters()}
    with pytest.raises(GrowthError, match=r"lm_head.weight \(in no optimizer\).*stay 0.0.*Add these parameters to an "
                                          r"optimizer.*recipe whose new entries are not zero"):
        trainer(GrowthCallback(stage(), min_lr=MIN_LR)).fit(module)
    assert module.losses == []  # before the first step
    assert all(torch.equal(p, start[n]) for n, p in module.model.named_parameters())


def test_a_frozen_parameter_is_refused_with_zero_new_entries_and_kept_with_copied_ones():
    frozen = MyModule()
    frozen.model.lm_head.requires_grad_(False)
    with pytest.raises(GrowthError, match=r"lm_head.weight \(frozen \(requires_grad=False\)\)"):
        trainer(GrowthCallback(stage(), min_lr=MIN_LR)).fit(frozen)
    module = MyModule(partial=True)
    head = module.model.lm_head.weight.detach().clone()
    trainer(GrowthCallback(stage(recipe="paper"), min_lr=MIN_LR)).fit(module)  # copy-copy: new columns non-zero
    grown = module.model.lm_head.weight
    assert grown.shape == (256, 64) and len(module.losses) == MAX_STEPS
    assert torch.equal(grown[:, :32] + grown[:, 32:], head) or torch.equal(grown[:, :32], grown[:, 32:])


@pytest.mark.parametrize("kind", ["teacher", "ema"])
def test_the_trained_gpt_grows_and_the_frozen_one_is_left_as_it_is(kind):
    module = MyModule(**{kind: True})
    other = getattr(module, kind)
    kept = {n: p.detach().clone() for n, p in other.state_dict().items()}
    trainer(GrowthCallback(stage(), min_lr=MIN_LR)).fit(module)
    assert module.model.config.n_embd == 64 and other.config.n_embd == 32
    if kind == "teacher":  # the EMA moves with the model until the growth, then stops
        assert all(torch.equal(p, kept[n]) for n, p in other.state_dict().items())


def test_several_trainable_gpts_the_optimizers_or_model_attr_decide():
    module = MyModule(teacher=True)
    module.teacher.requires_grad_(True)  # not frozen, but in no optimizer: the optimizers tell which one trains
    trainer(GrowthCallback(stage(), min_lr=MIN_LR)).fit(module)
    assert module.model.config.n_embd == 64 and module.teacher.config.n_embd == 32
    module = MyModule(teacher=True)
    trainer(GrowthCallback(stage(), min_lr=MIN_LR, model_attr="model"), max_steps=7).fit(module)
    assert module.model.config.n_embd == 64 and module.teacher.config.n_embd == 32
    with pytest.raises(GrowthError, match=r"model_attr='student'.*holds nothing there.*'model', 'teacher'"):
        trainer(GrowthCallback(stage(), min_lr=MIN_LR, model_attr="student")).fit(MyModule(teacher=True))


@pytest.mark.parametrize("build_in", ["init", "configure_model"])
def test_a_grown_checkpoint_loads(tmp_path, build_in):
    saver = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=6, save_top_k=-1)
    module = MyModule(build_in=build_in, max_steps=6)
    trainer(GrowthCallback(stage(rewarmup_steps=1), min_lr=MIN_LR), saver, max_steps=6, enable_checkpointing=True
            ).fit(module)
    (ckpt,) = tmp_path.glob("*step=6.ckpt")
    with pytest.raises(RuntimeError, match="size mismatch for model.lm_head.weight"):
        MyModule.load_from_checkpoint(ckpt)  # Lightning's own: the module builds the small model
    loaded = load_grown_checkpoint(MyModule, ckpt)
    assert type(loaded) is MyModule and "on_load_checkpoint" not in MyModule.__dict__  # the class as it was
    assert loaded.model.config.n_embd == 64
    for (name, a), b in zip(module.model.state_dict().items(), loaded.model.state_dict().values()):
        assert torch.equal(a, b), name
    ids = torch.arange(16).view(1, 16)
    assert torch.equal(loaded.model(ids), module.model(ids))


def test_a_rewarmup_past_max_steps_is_refused_before_any_step():
    """The CLI refuses the same stage (``tests/pretrain/test_cli.py``: growth.stages[0].rewarmup_steps)."""
    module = MyModule(max_steps=60)
    with pytest.raises(GrowthError, match=r"rewarmup_steps=250 does not fit in the 40 steps left after the growth "
                                          r"\(at_step=20, max_steps=60\).*at most 39"):
        trainer(GrowthCallback(GrowthStage(20, n_embd=64, intermediate_size=128), min_lr=MIN_LR),
                max_steps=60).fit(module)
    assert module.losses == [] and module.model.config.n_embd == 32


def test_a_misspelt_stage_keyword_names_the_close_one():
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'n_embdd' \(did you mean 'n_embd'\?\)"):
        GrowthStage(20, n_embdd=64)
