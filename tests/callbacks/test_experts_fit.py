"""Experts growth inside a Lightning fit (one process, CPU): dense -> MoE, then MoE -> 2x experts, then a depth
growth; the new experts' and router rows' applied learning rate read from SGD updates (accumulation 1 and 2),
bit-exact resume before, at and after each growth, and the checkpoint a plain litgpt state dict. Each also with
``first_k_dense_replace=1`` (block 0 keeps its dense MLP, which follows the module's schedule; the depth growth
copies it to the first two positions)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _measure import RecordSteps, applied_lr
from _tiny import TinyModule, assert_states_equal, make_trainer, paper_stage, tiny_config
from lightning.pytorch.callbacks import ModelCheckpoint
from litgpt import GPT

from lightning_sparkling import GrowthStage, WidthGrowthCallback, rewarmup_lr
from lightning_sparkling.growth.schedules import WarmupCosineLambda

MAX_STEPS = 16
UPCYCLE_AT, EXPERTS_AT, DEPTH_AT = 4, 8, 12


def _stages(first_k: int | None = None) -> list[GrowthStage]:
    """``first_k``: stage 0 keeps that many blocks dense (``first_k_dense_replace``), and stage 1 repeats it."""
    return [paper_stage(UPCYCLE_AT, mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2,
                        expert_init="drop-upcycle", rewarmup_ratio=2.0, rewarmup_steps=2,
                        first_k_dense_replace=first_k),
            paper_stage(EXPERTS_AT, n_expert=8, n_expert_per_token=4, optimizer_state="copy", rewarmup_ratio=1.5,
                        rewarmup_steps=2, first_k_dense_replace=first_k),
            paper_stage(DEPTH_AT, n_layer=4, depth_order="interleave", rewarmup_steps=2)]


def _fit(module, stages, **kwargs):
    growth = WidthGrowthCallback(stages)
    callbacks = [growth] + kwargs.pop("callbacks", [])
    ckpt_path = kwargs.pop("ckpt_path", None)
    trainer = make_trainer(callbacks, **kwargs)
    trainer.fit(module, ckpt_path=ckpt_path)
    return trainer, growth


@pytest.mark.slow
@pytest.mark.parametrize("first_k", [None, 1])
@pytest.mark.parametrize("accumulate", [1, 2])
def test_new_experts_follow_their_rewarmup_and_old_entries_the_schedule(accumulate, first_k):
    """SGD: every entry of an upcycled expert 1..3 and of the new router follows stage 0's re-warmup, expert 0 (the
    MLP itself) the module's schedule; after stage 1 the new experts 4..7 and router rows 4..7 follow stage 1's."""
    lr, steps = 0.05, 12
    module = TinyModule(optimizer="sgd", lr=lr, max_steps=steps, accumulate=accumulate)
    recorder = RecordSteps()
    trainer = make_trainer([recorder, WidthGrowthCallback(_stages(first_k)[:2])], max_steps=steps,
                           accumulate=accumulate, precision="64-true")
    trainer.fit(module)
    schedule = WarmupCosineLambda(5, steps, 0.1)

    def stage_lr(s, at, ratio):
        return rewarmup_lr(s, growth_step=at, lr_at_growth=lr * schedule(at), ratio=ratio, warmup_steps=2,
                           total_steps=steps, min_lr=lr * 0.1)

    checked = {"stage0": 0, "stage1": 0, "old": 0, "dense": 0}
    for record in recorder.records:
        step = record["step"]
        for name, before in record["before"].items():
            if name not in record["grad"] or before.ndim < 2:
                continue
            masks = {"old": torch.ones_like(before, dtype=torch.bool)}
            expert = int(name.split(".")[5]) if ".experts." in name else None
            if (expert is not None and expert in (1, 2, 3)) or name.endswith("gate.weight"):
                masks = {"stage0": masks["old"]}
            if name.endswith("gate.weight") and before.shape[0] == 8:
                rows = torch.zeros_like(before, dtype=torch.bool)
                rows[4:] = True
                masks = {"stage0": ~rows, "stage1": rows}
            elif expert is not None and expert >= 4:
                masks = {"stage1": masks["old"]}
            for kind, mask in masks.items():
                want = {"old": lambda: lr * schedule(step), "stage0": lambda: stage_lr(step, UPCYCLE_AT, 2.0),
                        "stage1": lambda: stage_lr(step, EXPERTS_AT, 1.5)}[kind]()
                got = applied_lr(before, record["grad"][name], record["after"][name], mask)
                got = got[torch.isfinite(got)]  # entries of an expert no token picked this step have no update
                assert torch.allclose(got, torch.full_like(got, want), rtol=1e-6, atol=0), (step, name, kind, want)
                checked[kind] += got.numel()
                checked["dense"] += got.numel() if ".h.0.mlp.fc_" in name and step >= UPCYCLE_AT else 0
    assert (checked.pop("dense") > 500) == (first_k == 1)  # the kept MLP took the schedule's LR after the growth
    assert min(checked.values()) > 500, checked
    assert stage_lr(UPCYCLE_AT + 2, UPCYCLE_AT, 2.0) != pytest.approx(lr * schedule(UPCYCLE_AT + 2))


@pytest.mark.slow
@pytest.mark.parametrize("accumulate,first_k", [(1, None), (2, None), (1, 1), (2, 1)])
def test_resume_bit_exact_across_upcycling_more_experts_and_depth(tmp_path: Path, accumulate, first_k):
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    reference = TinyModule(max_steps=MAX_STEPS, accumulate=accumulate)
    _, growth = _fit(reference, _stages(first_k), max_steps=MAX_STEPS, accumulate=accumulate, callbacks=[ckpt],
                     enable_checkpointing=True)
    assert growth.grown_stages == 3
    assert (reference.model.config.n_expert, reference.model.config.n_layer) == (8, 4)
    assert reference.model.config.first_k_dense_replace == (2 if first_k else None)  # block 0 and its copy
    expected = {n: t.detach().clone() for n, t in reference.model.state_dict().items()}
    # before, at, between and after the growths (with first_k: at each growth and after the last, to stay quick)
    steps = (2, UPCYCLE_AT, 6, EXPERTS_AT, DEPTH_AT, 14) if first_k is None else (UPCYCLE_AT, EXPERTS_AT, 14)
    for step in steps:
        resumed = TinyModule(max_steps=MAX_STEPS, accumulate=accumulate)
        _fit(resumed, _stages(first_k), max_steps=MAX_STEPS, accumulate=accumulate,
             ckpt_path=str(tmp_path / f"step={step}.ckpt"))
        assert_states_equal(resumed.model.state_dict(), expected, f"resume from step {step}")


@pytest.mark.slow
@pytest.mark.parametrize("first_k", [None, 1])
def test_checkpoint_after_upcycling_is_a_plain_litgpt_state_dict(tmp_path: Path, first_k):
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=UPCYCLE_AT + 1, save_top_k=-1, filename="{step}")
    module = TinyModule(max_steps=7)  # the re-warmup (2 steps from step 4) ends before max_steps
    _fit(module, _stages(first_k)[:1], max_steps=7, callbacks=[ckpt], enable_checkpointing=True)
    state = torch.load(tmp_path / f"step={UPCYCLE_AT + 1}.ckpt", weights_only=False)["state_dict"]
    gpt = GPT(tiny_config(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2, moe_intermediate_size=64,
                          first_k_dense_replace=first_k))
    gpt.load_state_dict({k.removeprefix("model."): v for k, v in state.items()}, strict=True)


def test_sparkling_plot_draws_an_experts_run(tmp_path: Path):
    """The dashboards of an experts run (upcycling with a dense first block, more experts, then depth), as users read
    them: the RMS monitor logs the upcycled and copied blocks from the growth on, the experts' copies' cosine is a
    symmetry tag, and ``sparkling plot`` draws them with every growth step marked."""
    from lightning.pytorch.loggers import TensorBoardLogger

    from lightning_sparkling import ActivationRMSMonitor
    from lightning_sparkling.dashboards.plotting import (GROWTH_GID, TAG_GID_PREFIX, dashboard_figure, load_run,
                                                         main_plot)

    logger = TensorBoardLogger(str(tmp_path), name="run", version=0)
    _fit(TinyModule(max_steps=MAX_STEPS), _stages(first_k=1), max_steps=MAX_STEPS, logger=logger,
         log_every_n_steps=1, callbacks=[ActivationRMSMonitor(every_n_steps=2)])
    run = load_run(logger.log_dir)
    assert "symmetry/stage_1/experts" in run.scalars  # the copied experts of stage 1 (n_expert 4 -> 8)
    steps, _ = run.scalars["rms/residual/block_03"]  # a block the depth growth added
    assert min(steps) >= DEPTH_AT
    fig = dashboard_figure([logger.log_dir])
    growth_steps = {line.get_xdata()[0] for ax in fig.axes for line in ax.lines if line.get_gid() == GROWTH_GID}
    assert growth_steps == {UPCYCLE_AT, EXPERTS_AT, DEPTH_AT}
    assert any(line.get_gid() == TAG_GID_PREFIX + "symmetry/stage_1/experts" for ax in fig.axes for line in ax.lines)
    assert main_plot([logger.log_dir, "--out", str(tmp_path / "experts.png"), "--dpi", "40"]) == 0
    assert (tmp_path / "experts.png").stat().st_size > 0


# ------------------------------------------------------------------ experts and widths grown in one stage
def _with_widths() -> list[GrowthStage]:
    """Dense -> MoE with the hidden size and MLP widened in the same stage, then 2x experts with the experts' inner
    size widened and a third block in the same stage."""
    return [paper_stage(UPCYCLE_AT, mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2, n_embd=48,
                        intermediate_size=96, rewarmup_ratio=2.0, rewarmup_steps=2),
            paper_stage(EXPERTS_AT, n_expert=8, n_expert_per_token=4, moe_intermediate_size=128, n_layer=3,
                        depth_order="middle", optimizer_state="copy", rewarmup_ratio=1.5, rewarmup_steps=2)]


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
def test_upcycled_expert_zero_trains_its_old_entries_on_the_schedule_and_its_new_ones_rewarmed(accumulate):
    """SGD, dense -> MoE with widths in the same stage: expert 0 is the MLP widened, so its old 64 x 32 block follows
    the module's schedule and its new rows and columns stage 0's re-warmup; experts 1..3 and the router follow the
    re-warmup in every entry."""
    lr, steps = 0.05, 8
    module = TinyModule(optimizer="sgd", lr=lr, max_steps=steps, accumulate=accumulate)
    recorder = RecordSteps()
    make_trainer([recorder, WidthGrowthCallback(_with_widths()[:1])], max_steps=steps, accumulate=accumulate,
                 precision="64-true").fit(module)
    assert (module.model.config.n_embd, module.model.config.moe_intermediate_size) == (48, 96)
    schedule = WarmupCosineLambda(5, steps, 0.1)
    rewarmed = {s: rewarmup_lr(s, growth_step=UPCYCLE_AT, lr_at_growth=lr * schedule(UPCYCLE_AT), ratio=2.0,
                               warmup_steps=2, total_steps=steps, min_lr=lr * 0.1) for s in range(UPCYCLE_AT, steps)}
    checked = {"old": 0, "new": 0}
    for record in recorder.records:
        step = record["step"]
        if step < UPCYCLE_AT:
            continue
        for name, before in record["before"].items():
            if name not in record["grad"] or before.ndim < 2 or not (".experts." in name or "gate" in name):
                continue
            old = torch.zeros_like(before, dtype=torch.bool)
            if ".experts.0." in name:  # fc_1 / fc_2: (inner, n_embd) from (64, 32); proj: (n_embd, inner)
                rows, cols = (32, 64) if name.endswith("proj.weight") else (64, 32)
                old[:rows, :cols] = True
            sizable = record["grad"][name].abs() > 1e-9  # the router's near-zero gradients round off the ratio
            for kind, mask in (("old", old & sizable), ("new", ~old & sizable)):
                got = applied_lr(before, record["grad"][name], record["after"][name], mask)
                got = got[torch.isfinite(got)]  # an expert no token picked this step has no update
                want = lr * schedule(step) if kind == "old" else rewarmed[step]
                assert torch.allclose(got, torch.full_like(got, want), rtol=1e-6, atol=0), (step, name, kind, want)
                checked[kind] += got.numel()
    assert min(checked.values()) > 500, checked
    assert rewarmed[UPCYCLE_AT + 2] != pytest.approx(lr * schedule(UPCYCLE_AT + 2))


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
def test_resume_bit_exact_across_experts_grown_with_widths_and_depth(tmp_path: Path, accumulate):
    steps = 12
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    reference = TinyModule(max_steps=steps, accumulate=accumulate)
    _fit(reference, _with_widths(), max_steps=steps, accumulate=accumulate, callbacks=[ckpt],
         enable_checkpointing=True)
    config = reference.model.config
    assert (config.n_expert, config.n_embd, config.moe_intermediate_size, config.n_layer) == (8, 48, 128, 3)
    expected = {n: t.detach().clone() for n, t in reference.model.state_dict().items()}
    GPT(config).load_state_dict(expected, strict=True)  # a plain litgpt state dict of the grown config
    for step in (UPCYCLE_AT, EXPERTS_AT, 10):
        resumed = TinyModule(max_steps=steps, accumulate=accumulate)
        _fit(resumed, _with_widths(), max_steps=steps, accumulate=accumulate,
             ckpt_path=str(tmp_path / f"step={step}.ckpt"))
        assert_states_equal(resumed.model.state_dict(), expected, f"resume from step {step}")
