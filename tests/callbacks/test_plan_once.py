"""Each stage is planned once: ``GrowthCallback.setup``'s dry run over the stages keeps its plans and the growth
applies them (``plan_growth`` runs once per stage in a fit, not again at growth time), with the weights and
optimizer state of re-planning; a plan that does not fit the model is re-planned by the callback, refused by
``grow_model``; plans the caller made (``plans=``, the CLI's run plan) are applied, not planned again."""

from __future__ import annotations

import pytest

import torch

from lightning_sparkling import GrowthCallback, grow_model
from lightning_sparkling.callbacks import growth as callback_module
from lightning_sparkling.growth import plan as plan_module
from lightning_sparkling.growth.errors import GrowthError
from _tiny import TinyModule, make_trainer, paper_stage, tiny_config

STAGES = (paper_stage(3, n_embd=48, intermediate_size=96, rewarmup_steps=2),  # width, then depth + heads
          paper_stage(6, n_layer=3, n_head=8, rewarmup_steps=2))


def _count_plans(monkeypatch) -> list[int]:
    calls: list[int] = []
    original = plan_module.plan_growth

    def counting(*args, **kwargs):
        calls.append(kwargs["stage_index"])
        return original(*args, **kwargs)

    for module in (plan_module, callback_module):  # plan.checked_plan and the callback's dry run
        monkeypatch.setattr(module, "plan_growth", counting)
    return calls


def _fit(replan: bool = False, monkeypatch=None, accumulate: int = 1) -> tuple[TinyModule, torch.optim.Optimizer]:
    if replan:  # the behaviour before plans were kept: plan again at growth time
        monkeypatch.setattr(GrowthCallback, "_plan", lambda self, k, config, *, seed, tied: plan_module.plan_growth(
            config, self.stages[k], seed=seed, stage_index=k, tied_embeddings=tied))
    module = TinyModule(tiny_config(), max_steps=9, accumulate=accumulate)
    trainer = make_trainer([GrowthCallback(STAGES, min_lr=1e-3)], max_steps=9, accumulate=accumulate)
    trainer.fit(module)
    assert module.model.config.n_layer == 3 and module.model.config.n_embd == 48
    return module, trainer.optimizers[0]


@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_two_stage_fit_plans_each_stage_once_with_the_weights_of_planning_again(monkeypatch, accumulate):
    calls = _count_plans(monkeypatch)
    kept, kept_opt = _fit(accumulate=accumulate)
    assert calls == [0, 1]  # setup's dry run; the growths applied its plans
    calls.clear()
    with monkeypatch.context() as m:
        again, again_opt = _fit(replan=True, monkeypatch=m, accumulate=accumulate)
    assert calls == [0, 1, 0, 1]  # the dry run, then each growth planning again
    for (name, a), b in zip(kept.model.state_dict().items(), again.model.state_dict().values()):
        assert torch.equal(a, b), name
    for a, b in zip(kept_opt.state.values(), again_opt.state.values()):
        assert torch.equal(a["exp_avg"], b["exp_avg"]) and torch.equal(a["exp_avg_sq"], b["exp_avg_sq"])


def test_a_model_changed_after_setup_is_planned_again_not_grown_by_the_stale_plan(monkeypatch):
    calls = _count_plans(monkeypatch)
    callback = GrowthCallback(STAGES[0], min_lr=1e-3)
    module = TinyModule(tiny_config(), max_steps=6)
    trainer = make_trainer([callback], max_steps=6)
    original = callback.setup

    def setup_then_widen(trainer, pl_module, stage):
        original(trainer, pl_module, stage)
        grow_model(pl_module.model, paper_stage(0, intermediate_size=80))  # after the dry run, before the growth

    monkeypatch.setattr(callback, "setup", setup_then_widen)
    trainer.fit(module)
    assert calls == [0, 0, 0]  # the dry run, the widening above, the growth planned again on the changed model
    assert (module.model.config.n_embd, module.model.config.intermediate_size) == (48, 96)


@pytest.mark.parametrize("seed, planned", [(0, [0, 1]), (1, [0, 1, 0])])
def test_a_resume_regrows_by_the_dry_run_plans_and_plans_again_for_a_checkpoint_of_another_seed(monkeypatch, tmp_path,
                                                                                                  seed, planned):
    from lightning.pytorch.callbacks import ModelCheckpoint

    saver = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=5, save_top_k=-1)
    make_trainer([GrowthCallback(STAGES, min_lr=1e-3), saver], max_steps=9, enable_checkpointing=True).fit(
        TinyModule(tiny_config(), max_steps=9))
    calls = _count_plans(monkeypatch)
    callback = GrowthCallback(STAGES, min_lr=1e-3, seed=seed)
    module = TinyModule(tiny_config(), max_steps=9)
    make_trainer([callback], max_steps=9).fit(module, ckpt_path=tmp_path / "epoch=0-step=5.ckpt")
    assert calls == planned  # setup's dry run (this callback's seed); stage 0 again only for the checkpoint's seed 0
    assert callback._plans[0].seed == 0 and callback._plans[1].seed == seed  # regrown as written, grown by its own
    assert module.model.config.n_layer == 3


def test_grow_model_refuses_a_plan_of_another_model_or_seed():
    from litgpt import GPT

    torch.manual_seed(0)
    model = GPT(tiny_config())
    before = {n: p.clone() for n, p in model.state_dict().items()}
    plan = plan_module.plan_growth(model.config, STAGES[0], seed=0)
    for kwargs in (dict(seed=1), dict(stage_index=1)):
        with pytest.raises(GrowthError, match="is not the plan of"):
            grow_model(model, STAGES[0], plan=plan, **kwargs)
    with pytest.raises(GrowthError, match="another config"):
        grow_model(model, STAGES[0], plan=plan_module.plan_growth(tiny_config(n_layer=3), STAGES[0]))
    assert all(torch.equal(before[n], p) for n, p in model.state_dict().items())  # untouched
    assert grow_model(model, STAGES[0], plan=plan).plan is plan


def test_the_plan_of_a_named_target_fits_the_stage_as_given():
    """``plan.stage`` is the resolved stage (the target's sizes set); the plan still fits the stage the user gave."""
    config = tiny_config()
    stage = paper_stage(1, model_config={**{k: getattr(config, k) for k in config.__dataclass_fields__
                                            if k not in ("rope_n_elem", "hf_config")}, "n_embd": 64})
    plan = plan_module.plan_growth(config, stage)
    assert plan.stage != stage and plan.stage.n_embd == 64
    assert plan.fits(config, stage, seed=0, stage_index=0, tied_embeddings=False)


def test_plans_the_caller_made_are_applied_with_the_weights_of_planning_and_one_that_does_not_fit_is_planned_again(
        monkeypatch):
    """``GrowthCallback(plans=...)`` (what ``sparkling pretrain`` passes from its run plan): the dry run keeps each
    given plan that fits and plans none of them again; the fit ends where the callback's own plans end it. A plan of
    another seed does not fit: that stage is planned again (the next one, on the same config, is kept)."""
    config = tiny_config()
    first = plan_module.plan_growth(config, STAGES[0], seed=0, stage_index=0)
    given = [first, plan_module.plan_growth(first.new_config, STAGES[1], seed=0, stage_index=1)]
    other_seed = [plan_module.plan_growth(config, STAGES[0], seed=1, stage_index=0), given[1]]
    own, own_opt = _fit()
    calls = _count_plans(monkeypatch)
    module = TinyModule(tiny_config(), max_steps=9)
    trainer = make_trainer([callback := GrowthCallback(STAGES, min_lr=1e-3, plans=given)], max_steps=9)
    trainer.fit(module)
    assert calls == [] and callback._plans == {0: given[0], 1: given[1]}  # applied as given, none planned again
    for (name, a), b in zip(own.model.state_dict().items(), module.model.state_dict().values()):
        assert torch.equal(a, b), name
    for a, b in zip(own_opt.state.values(), trainer.optimizers[0].state.values()):
        assert torch.equal(a["exp_avg"], b["exp_avg"]) and torch.equal(a["exp_avg_sq"], b["exp_avg_sq"])
    module = TinyModule(tiny_config(), max_steps=9)
    make_trainer([callback := GrowthCallback(STAGES, min_lr=1e-3, plans=other_seed)], max_steps=9).fit(module)
    assert calls == [0] and callback._plans[0].seed == 0 and callback._plans[1] is given[1]
    with pytest.raises(ValueError, match="expected GrowthPlan objects"):
        GrowthCallback(STAGES, plans=[{"n_embd": 48}])
