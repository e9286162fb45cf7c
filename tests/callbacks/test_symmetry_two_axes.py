"""The symmetry loop (``paper_stage(symmetry_target=...)``) on a stage that grows two axes at once, read from the
parameters:

- the decision follows the *largest* cosine over the stage's axes: ``n_embd`` and ``intermediate_size`` grow in one
  stage, and right after the growth the test flips the sign of the copied MLP channels' ``fc_2`` rows and ``proj``
  columns (function preserving: the two signs cancel), so the ``intermediate_size`` copies are anti-aligned with
  their sources while the ``n_embd`` copies stay aligned. One axis is above the target, the other below: the boost
  must double at every check (largest cosine above target), which the applied LR (SGD: ``-delta / grad``) shows;
- ``growth/lr_new/stage_0``, as the logger receives it, is the LR the new entries are actually updated with,
  boost included.

Both cosines are measured here from the weights, the LR from the updates.
"""

from __future__ import annotations

import pytest

import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger

from lightning_sparkling import GrowthStage, WidthGrowthCallback, rewarmup_lr
from lightning_sparkling.growth.plan import plan_growth
from lightning_sparkling.growth.schedules import WarmupCosineLambda

from _measure import RecordSteps, applied_lr
from _tiny import TinyModule, make_trainer, paper_stage, tiny_config

MAX_STEPS = 16
AT = 6
LR = 0.05
TARGET = 0.5
INTERVAL = 2
MAX_BOOST = 4.0
OLD_E, NEW_E = 32, 48
OLD_I, NEW_I = 64, 96


def _stage() -> GrowthStage:
    return paper_stage(AT, n_embd=NEW_E, intermediate_size=NEW_I, rewarmup_ratio=1.5, rewarmup_steps=4,
                       symmetry_target=TARGET, symmetry_interval=INTERVAL, symmetry_max_boost=MAX_BOOST,
                       symmetry_release="hold")


class _CaptureLogger(Logger):
    """Keeps every logged value: ``values[key][step]``."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, dict[int, float]] = {}

    @property
    def name(self):
        return "capture"

    @property
    def version(self):
        return 0

    def log_hyperparams(self, params, *args, **kwargs):
        pass

    def log_metrics(self, metrics, step=None):
        for key, value in metrics.items():
            self.values.setdefault(key, {})[step] = float(value)


class _AntiAlignMlpCopies(Callback):
    """Right after the growth (first micro-batch of step ``AT``), negate the new ``intermediate_size`` channels'
    ``fc_2`` rows and ``proj`` columns in every block. ``proj(silu(fc_1 x) * fc_2 x)`` is unchanged (the signs
    cancel); the MLP copies' cosine to their sources becomes (1 - 1 - 1) / 3 per block, while every ``n_embd`` copy
    keeps cosine 1 (a source column / row and its copy are negated on the same entries)."""

    def __init__(self) -> None:
        self.done = False

    @torch.no_grad()
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.done or trainer.global_step != AT:
            return
        for block in pl_module.model.transformer.h:
            assert block.mlp.fc_2.weight.shape == (NEW_I, NEW_E), "the growth has not happened yet"
            block.mlp.fc_2.weight[OLD_I:].neg_()
            block.mlp.proj.weight[:, OLD_I:].neg_()
        self.done = True


def _copy_cosines(w: torch.Tensor, dim: int, old: int, src: torch.Tensor) -> float:
    """Mean cosine of slices ``old + j`` of ``w`` along ``dim`` to slices ``src[j]``."""
    w = w.movedim(dim, 0)
    return float(F.cosine_similarity(w[old:old + len(src)].flatten(1), w[src].flatten(1), dim=1).mean())


def _axis_cosines(weights: dict[str, torch.Tensor], src_e: torch.Tensor, src_i: torch.Tensor
                  ) -> dict[str, list[float]]:
    """Per axis, the copy cosine of every matrix along which that axis was copied (2 blocks, embeddings, head)."""
    inner, embd = [], []
    embd.append(_copy_cosines(weights["transformer.wte.weight"], 1, OLD_E, src_e))
    embd.append(_copy_cosines(weights["lm_head.weight"], 1, OLD_E, src_e))
    for i in range(2):
        h = f"transformer.h.{i}"
        embd.append(_copy_cosines(weights[f"{h}.attn.qkv.weight"], 1, OLD_E, src_e))
        embd.append(_copy_cosines(weights[f"{h}.attn.proj.weight"], 0, OLD_E, src_e))
        for n in ("fc_1", "fc_2"):
            w = weights[f"{h}.mlp.{n}.weight"]  # (inner, n_embd)
            embd.append(_copy_cosines(w, 1, OLD_E, src_e))
            inner.append(_copy_cosines(w, 0, OLD_I, src_i))
        w = weights[f"{h}.mlp.proj.weight"]  # (n_embd, inner)
        embd.append(_copy_cosines(w, 0, OLD_E, src_e))
        inner.append(_copy_cosines(w, 1, OLD_I, src_i))
    return {"n_embd": embd, "intermediate_size": inner}


@pytest.fixture(scope="module")
def loop_run(tmp_path_factory):
    """SGD without momentum, float64; one stage grows n_embd 32 -> 48 and the MLP 64 -> 96 at step 6 under the loop
    (target 0.5, checks every 2 steps, boost up to 4x, held); the MLP copies are anti-aligned right after growth."""
    module = TinyModule(optimizer="sgd", lr=LR, max_steps=MAX_STEPS)
    recorder = RecordSteps()
    logger = _CaptureLogger()
    callbacks = [recorder, _AntiAlignMlpCopies(), WidthGrowthCallback(_stage(), symmetry_every_n_steps=0)]
    trainer = make_trainer(callbacks, max_steps=MAX_STEPS, precision="64-true", logger=logger, log_every_n_steps=1,
                           default_root_dir=tmp_path_factory.mktemp("symmetry-two-axes"))
    trainer.fit(module)
    assert callbacks[1].done
    assert [r["step"] for r in recorder.records] == list(range(MAX_STEPS))
    plan = plan_growth(tiny_config(), paper_stage(AT, n_embd=NEW_E, intermediate_size=NEW_I), seed=0)
    src_e, src_i = plan.channels["n_embd"].src, plan.channels["intermediate_size"].src
    # the copy maps are those of the run: right after growth, the new embedding columns are their sources' columns
    wte = recorder.records[AT]["before"]["transformer.wte.weight"]
    assert torch.equal(wte[:, OLD_E:], wte[:, src_e])
    return recorder, logger, src_e, src_i


def _new_entry_lrs(record: dict) -> torch.Tensor:
    """Applied LR (``-delta / grad``) of new entries of both axes: the new MLP rows of ``fc_2`` (block 1) and the
    new embedding columns."""
    got = []
    for name, part in (("transformer.h.1.mlp.fc_2.weight", (slice(OLD_I, None), slice(None))),
                       ("transformer.wte.weight", (slice(None), slice(OLD_E, None)))):
        before = record["before"][name]
        mask = torch.zeros_like(before, dtype=torch.bool)
        mask[part] = True
        got.append(applied_lr(before, record["grad"][name], record["after"][name], mask))
    assert all(g.numel() > 50 for g in got), [g.numel() for g in got]
    return torch.cat(got)


def _schedule_lr(step: int) -> float:
    """The stage's re-warmup LR (no boost) for the optimizer step taken at global step ``step``."""
    schedule = WarmupCosineLambda(5, MAX_STEPS, 0.1)
    return rewarmup_lr(step, growth_step=AT, lr_at_growth=LR * schedule(AT), ratio=1.5, warmup_steps=4,
                       total_steps=MAX_STEPS, min_lr=LR * schedule.min_lr_ratio)


def test_two_axis_stage_boost_follows_the_largest_axis_cosine(loop_run):
    """At every check the n_embd copies (cosine ~1) are above the target and the MLP copies (cosine ~ -1/3) below
    it: the largest cosine is above, so the boost doubles at each check (2x, then 4x, capped). Deciding on the
    smallest cosine would stop the loop at the first check with the boost at 1x."""
    recorder, _, src_e, src_i = loop_run
    boost, done = 1.0, False
    boosts, checked = [], False
    for record in recorder.records:
        step = record["step"]
        if step < AT:
            continue
        if step > AT and (step - AT) % INTERVAL == 0 and not done:  # the check after `step` optimizer steps
            cosines = _axis_cosines(record["before"], src_e, src_i)
            embd, inner = cosines["n_embd"], cosines["intermediate_size"]
            mean_embd, mean_inner = sum(embd) / len(embd), sum(inner) / len(inner)
            # the two axes are on opposite sides of the target, by a wide margin: every n_embd matrix above it, the
            # MLP axis's mean (fc_1 rows ~1, fc_2 rows and proj columns ~ -1) below it
            assert min(embd) > TARGET + 0.3, (step, embd)
            assert mean_inner < TARGET - 0.3, (step, inner)
            checked = True
            largest = max(mean_embd, mean_inner)
            if largest < TARGET:
                done = True
            else:
                boost = min(2.0 * boost, MAX_BOOST)
        boosts.append(boost)
        got = _new_entry_lrs(record)
        want = boost * _schedule_lr(step)
        torch.testing.assert_close(got, torch.full_like(got, want), rtol=1e-6, atol=0,
                                   msg=lambda m: f"step {step}: expected boost {boost} "
                                                 f"(applied/schedule = {got.median().item() / _schedule_lr(step):.4g})"
                                                 f"\n{m}")
    assert checked and not done
    assert boosts[:INTERVAL] == [1.0] * INTERVAL and boosts[INTERVAL] == 2.0 and max(boosts) == MAX_BOOST, boosts


def test_logged_lr_new_is_the_applied_lr_under_the_symmetry_loop(loop_run):
    """``growth/lr_new/stage_0`` logged at step ``s`` is the LR the new entries were updated with in the optimizer
    step taken at ``s`` (read from the parameters), boost included, at every step from the growth on; and
    ``growth/symmetry_boost/stage_0`` is the ratio of that LR to the re-warmup schedule."""
    recorder, logger, _, _ = loop_run
    logged = logger.values["growth/lr_new/stage_0"]
    logged_boost = logger.values["growth/symmetry_boost/stage_0"]
    assert set(range(AT, MAX_STEPS)) <= set(logged), sorted(logged)
    applied_boosts = []
    for record in recorder.records[AT:]:
        step = record["step"]
        got = _new_entry_lrs(record)
        applied = float(got.median())
        torch.testing.assert_close(got, torch.full_like(got, applied), rtol=1e-6, atol=0)  # one LR for all
        assert logged[step] == pytest.approx(applied, rel=1e-6), (
            f"step {step}: logged growth/lr_new/stage_0 {logged[step]:.6g}, applied to the new entries {applied:.6g}")
        applied_boosts.append(applied / _schedule_lr(step))
        assert logged_boost[step] == pytest.approx(applied_boosts[-1], rel=1e-6), step
    assert max(applied_boosts) == pytest.approx(MAX_BOOST, rel=1e-6), applied_boosts  # the boost was on
