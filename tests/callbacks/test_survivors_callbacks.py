"""Behaviours a mutation audit found untested (issue 40, "The survivors"), inside a Lightning fit: no ``WSDLambda``
advice to a module already on ``WSDLambda`` (8), a resume rebuilds the new entries' re-warmup from the stage record,
not from the resumed module's schedule (9), a checkpoint of a release without the symmetry keys resumes bit for bit
(10), and the growth log of an experts growth says whether it keeps the function (``ExpertsChange.exact``).
docs/MUTATIONS.md lists each mutation and the failure line it gives here."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from _tiny import TinyModule, assert_states_equal, make_trainer, tiny_config
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_sparkling import GrowthStage, WidthGrowthCallback
from lightning_sparkling.growth.schedules import WSDLambda

pytestmark = pytest.mark.slow

MAX_STEPS, WARMUP, AT = 16, 2, 3
ADVICE = "holds its LR over steps"  # warn_untracked_stable_phase's warning


class WSDModule(TinyModule):
    """TinyModule on ``WSDLambda`` (``fraction``: its decay phase's share of the run); ``wrap``: the same schedule as
    a plain function the callback cannot look into."""

    def __init__(self, *args, fraction: float = 0.5, wrap: bool = False, **kwargs) -> None:
        super().__init__(*args, max_steps=MAX_STEPS, **kwargs)
        self.fraction, self.wrap = fraction, wrap

    def _schedule(self, opt):
        fn = WSDLambda(WARMUP, self.max_steps, self.min_lr_ratio, decay_fraction=self.fraction)
        if self.wrap:
            fn = lambda s, f=fn: f(s)  # noqa: E731
        return torch.optim.lr_scheduler.LambdaLR(opt, fn)


def _stages() -> list[GrowthStage]:
    return [GrowthStage(AT, n_embd=48, intermediate_size=128, init="copy-copy", rewarmup_ratio=1.5, rewarmup_steps=2)]


def _advice(module: WSDModule, accumulate: int = 1) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make_trainer([WidthGrowthCallback(_stages(), min_lr=1e-3)], max_steps=6, accumulate=accumulate).fit(module)
    return [str(w.message) for w in caught if ADVICE in str(w.message)]


# --------------------------------------------------------------------------------- 8. no WSDLambda advice on WSDLambda
@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_module_on_wsd_lambda_is_not_told_to_use_wsd_lambda(accumulate):
    """The re-warmup (steps 3..5, 3..7) lies in the stable phase of a 16-step WSD decaying from step 8: a user's own
    lambda gets the advice to use WSDLambda, a module on WSDLambda does not."""
    assert _advice(WSDModule(wrap=True), accumulate) != []
    assert _advice(WSDModule(), accumulate) == []


# --------------------------------------------------------------------------------- 9 / 10. resume
@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted 16-step run (WSD decaying from step 8, growth at 3, AdamW), a checkpoint at every step."""
    out = tmp_path_factory.mktemp("survivors-resume")
    module = WSDModule()
    ckpt = ModelCheckpoint(dirpath=out, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    growth = WidthGrowthCallback(_stages())
    make_trainer([ckpt, growth], max_steps=MAX_STEPS, enable_checkpointing=True).fit(module)
    assert growth._records[0].lr_decay == [{"decay_start": 8, "decay_shape": "linear"}]
    return out, {n: p.detach().clone() for n, p in module.model.state_dict().items()}


def _resume(module: WSDModule, ckpt: Path) -> dict[str, torch.Tensor]:
    make_trainer([WidthGrowthCallback(_stages())], max_steps=MAX_STEPS).fit(module, ckpt_path=str(ckpt))
    return module.model.state_dict()


def test_resume_rebuilds_the_rewarmup_from_the_record_not_from_the_resumed_modules_schedule(reference):
    """The resumed module is built with another decay phase (from step 12): Lightning restores the module's schedule
    from the checkpoint, and the new entries' re-warmup comes from the stage record (decaying from step 8), so the run
    ends bit for bit where the uninterrupted one does."""
    out, expected = reference
    assert WSDLambda(WARMUP, MAX_STEPS, 0.1, decay_fraction=0.25).decay_start == 12
    got = _resume(WSDModule(fraction=0.25), out / "step=5.ckpt")
    assert_states_equal(got, expected, "resume from step 5 with another WSD decay_fraction")


def test_a_checkpoint_without_the_symmetry_keys_resumes_bit_for_bit(reference, tmp_path):
    """A release before the symmetry loop wrote records without ``symmetry_boost`` / ``symmetry_done``: such a stage
    has no loop, and the run goes on past its first symmetry check (10 steps after the growth) exactly as before."""
    out, expected = reference
    saved = torch.load(out / "step=5.ckpt", map_location="cpu", weights_only=False)
    key = "GrowthCallback"
    for record in saved["callbacks"][key]["records"]:
        del record["symmetry_boost"], record["symmetry_done"]
    torch.save(saved, tmp_path / "old.ckpt")
    got = _resume(WSDModule(), tmp_path / "old.ckpt")
    assert MAX_STEPS > AT + GrowthStage(0, n_embd=64).symmetry_interval
    assert_states_equal(got, expected, "resume from an old checkpoint at step 5")


# --------------------------------------------------------------------------------- ExpertsChange.exact: the growth log
@pytest.mark.parametrize("n_expert, k, verdict", [(6, 3, "function changes"), (12, 6, "function kept")])
def test_growth_log_says_whether_more_experts_keep_the_function(monkeypatch, n_expert, k, verdict):
    """4 experts top-2 -> 6 top-3 copies experts 0 and 1 only (changes the function); -> 12 top-6 copies each 2 times
    (keeps it)."""
    config = tiny_config(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2, moe_intermediate_size=16)
    module = TinyModule(config, max_steps=8)
    log = _growth_log(monkeypatch)
    make_trainer([WidthGrowthCallback(GrowthStage(2, n_expert=n_expert, n_expert_per_token=k,
                                                  rewarmup_steps=1))], max_steps=8).fit(module)
    assert module.model.config.n_expert == n_expert
    lines = [m for m in log if "grew the model" in m]
    assert len(lines) == 1, log
    assert f"4 -> {n_expert} experts, top-2 -> top-{k}, copy" in lines[0], lines[0]
    assert lines[0].count(verdict) == 2, lines[0]  # the experts line and the logits line
    assert ["logits", *verdict.split()] in [line.split() for line in lines[0].splitlines()], lines[0]


@pytest.mark.parametrize("shift, verdict", [(-2.0, "function changes"), (0.0, "function kept")])
def test_growth_log_reads_the_grouped_routers_corrections_from_the_model(monkeypatch, shift, verdict):
    """Doubling a ``GroupedTopkRouter``'s experts and K keeps the function only while no score correction is below
    0.0 (the masked groups' score): the growth log reads the trained model's corrections (``shift`` added to all)."""
    config = tiny_config(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2, moe_intermediate_size=16,
                         n_expert_groups=2, n_topk_groups=1, n_topk_scores_per_group=2, norm_topk_prob=True)
    module = TinyModule(config, max_steps=8)
    with torch.no_grad():
        for block in module.model.transformer.h:
            block.mlp.gate.e_score_correction_bias.add_(shift)
    log = _growth_log(monkeypatch)
    make_trainer([WidthGrowthCallback(GrowthStage(2, n_expert=8, n_expert_per_token=4, rewarmup_steps=1))],
                 max_steps=8).fit(module)
    lines = [m for m in log if "grew the model" in m]
    assert len(lines) == 1 and "4 -> 8 experts, top-2 -> top-4" in lines[0], log
    assert lines[0].count(verdict) == 2 and "while every" not in lines[0], lines[0]  # the experts and logits lines


def _growth_log(monkeypatch) -> list[str]:
    """The messages ``GrowthCallback`` logs through ``rank_zero_info`` (read at the call: whatever the logging
    configuration)."""
    from lightning_sparkling.callbacks import growth

    messages: list[str] = []
    monkeypatch.setattr(growth, "rank_zero_info", lambda message, *a, **k: messages.append(str(message)))
    return messages
