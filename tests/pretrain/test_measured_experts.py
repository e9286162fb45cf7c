"""The measured map and the experts axis (issue 30): a dense -> MoE stage is the ``upcycle`` map category and MoE ->
more experts the ``experts`` category; a run is advised from the cells of its own category and ``expert_init`` only,
never from a width or depth cell however near that one is, and a map without an experts cell says nothing was
measured."""

from __future__ import annotations

import pytest

from lightning_sparkling import GrowthStage
from lightning_sparkling.pretrain.advice.measured import MeasuredCell, advise, classify_category

UPCYCLE = dict(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2)


def cell(**kw) -> MeasuredCell:
    base = dict(category="upcycle", recipe="paper", schedule="cosine", growth_at=0.25, tokens_per_param=5.7,
                delta=-0.05, sd=0.01, seeds=3, seeds_above=0, where="test", init="copy")
    return MeasuredCell(**{**base, **kw})


@pytest.mark.parametrize("stage, sizes, expected", [
    (GrowthStage(5, **UPCYCLE), None, "upcycle"),
    (GrowthStage(5, **UPCYCLE), [["n_expert", "n_expert_per_token"]], "upcycle"),  # sizes as `plan` passes them
    (GrowthStage(5, n_expert=8), None, "experts"),
    (GrowthStage(5, n_expert=8, n_expert_per_token=4), [["n_expert", "n_expert_per_token"]], "experts+topk"),
])
def test_dense_to_moe_and_more_experts_are_two_axes(stage, sizes, expected):
    assert classify_category([stage], sizes) == expected


# a width, a depth and a joint cell exactly at the run's ratio and timing: none may answer for an experts stage
OTHERS = [cell(category=category, init=None, delta=-0.3) for category in ("inner", "depth", "joint", "hidden")]


@pytest.mark.parametrize("init", ["copy", "drop-upcycle", "random"])
def test_an_upcycle_run_gets_the_cell_of_its_own_expert_init(init):
    cells = [*OTHERS, cell(init="copy", delta=-0.05), cell(init="drop-upcycle", delta=-0.04),
             cell(init="random", delta=0.02, seeds_above=3), cell(category="experts", delta=-0.2)]
    advice = advise([GrowthStage(250, **UPCYCLE, expert_init=init)], total_steps=1000, tokens_per_param=5.7,
                    recipe="paper", cells=cells)
    assert (advice.category, advice.init) == ("upcycle", init)
    assert advice.near and (advice.cell.category, advice.cell.init) == ("upcycle", init)
    assert advice.pays == (init != "random")
    assert f"upcycle (expert_init {init})" in advice.message() and "upcycle, expert_init" in advice.message()


def test_an_experts_run_never_gets_a_width_or_depth_cell():
    grow = [GrowthStage(250, n_expert=8, expert_init="copy")]
    advice = advise(grow, total_steps=1000, tokens_per_param=5.7, recipe="paper", cells=[*OTHERS, cell()])
    assert advice.cell is None and not advice.pays  # the upcycle cell is another category
    assert advice.message().startswith("nothing was measured for this run (experts, expert_init copy")
    advice = advise(grow, total_steps=1000, tokens_per_param=5.7, recipe="paper",
                    cells=[*OTHERS, cell(category="experts", delta=0.01, seeds_above=2)])
    assert advice.cell.category == "experts" and not advice.pays
    # and a width run never gets an experts cell
    width = advise([GrowthStage(250, intermediate_size=256)], total_steps=1000, tokens_per_param=5.7,
                   recipe="paper", cells=[cell(category="inner"), cell(category="upcycle")])
    assert width.init is None and width.cell is None  # the inner cell here carries an init, as no width cell does


def test_a_cell_describes_its_expert_init():
    assert cell(init="drop-upcycle").key() == "upcycle[drop-upcycle]/paper/cosine@25%/5.7"
    assert cell(init="random").describe().startswith("upcycle (expert_init random), paper, cosine, growth at 25%")
    assert cell(category="joint", init=None).describe().startswith("joint, paper, cosine")


QUICK = {  # benchmarks/reproduce.py's --size quick, the setting the experts cells were measured at
    "model_config": {"name": "repro", "mlp_class_name": "LLaMAMLP", "norm_class_name": "RMSNorm", "bias": False,
                     "parallel_residual": False, "rotary_percentage": 1.0, "n_layer": 4, "n_head": 2,
                     "n_query_groups": 2, "head_size": 16, "n_embd": 32, "intermediate_size": 128, "block_size": 128},
    "precision": "32-true", "accelerator": "cpu", "devices": 1,
    "data": {"source": "stdlib", "vocab_size": 1024, "seq_len": 128},
    "train": {"global_batch_size": 8, "micro_batch_size": 8, "max_steps": 1000},
    "optimizer": {"class_path": "torch.optim.AdamW", "init_args": {"lr": 0.003}},
}


@pytest.mark.parametrize("init, at_step", [("copy", 250), ("drop-upcycle", 250), ("random", 250), ("copy", 50)])
def test_sparkling_plan_of_an_upcycle_run_names_its_measured_cell(tmp_path, init, at_step):
    """The path users take: ``sparkling plan`` on the measured setting (the CLI's default growth.recipe) reports the
    upcycle cell of the run's ``expert_init`` from the package's own map, with what the dense model continued gave."""
    import yaml

    from lightning_sparkling.pretrain.advice.measured import load_map
    from lightning_sparkling.pretrain.cli import parse, plan

    path = tmp_path / "upcycle.yaml"
    stage = {"at_step": at_step, **UPCYCLE, "expert_init": init, "rewarmup_steps": 50}
    path.write_text(yaml.safe_dump({**QUICK, "growth": {"stages": [stage]}}))
    _, run, _ = parse(["--config", str(path)])
    report = plan(run, print_report=False)
    (cell,) = [c for c in load_map() if (c.category, c.init, c.growth_at) == ("upcycle", init, at_step / 1000)]
    advice = report["regime_advice"]
    speedup = f"{cell.describe_speedup()}, " if cell.speedup is not None else ""  # measured at 25% (vs MoE scratch)
    assert f"upcycle (expert_init {init}), paper, cosine, growth at {at_step / 10:.0f}%, 5.7 tokens per parameter: " \
           f"{speedup}Δ {cell.delta:+.3f} ± {cell.sd:.3f}" in advice
    assert f"Δ {cell.start_delta:+.3f} ± {cell.start_sd:.3f} against the model it grew from continued on the same " \
           f"FLOPs, above it in {cell.start_seeds_above}/{cell.seeds} seeds" in advice
    # every measured upcycle beat the MoE from scratch and lost to staying dense: the advice says it did not pay
    assert cell.delta <= 0 < cell.start_delta
    assert "growth paid" not in advice and "above the model it grew from continued on the same FLOPs" in advice
    assert report["regime_warning"] is not None


def test_a_cell_pays_only_at_or_below_both_scratch_and_the_model_it_grew_from():
    """An upcycle that beats the MoE from scratch but not the dense model it started from does not pay; the three
    start fields come together or not at all."""
    from lightning_sparkling.pretrain.advice.measured import Advice, MeasuredCell

    base = dict(category="upcycle", recipe="paper", schedule="cosine", growth_at=0.25, tokens_per_param=5.7,
                delta=-0.03, sd=0.01, seeds=3, seeds_above=0, where="w", init="copy")
    assert MeasuredCell(**base).pays
    assert MeasuredCell(**base, start_delta=-0.01, start_sd=0.01, start_seeds_above=0).pays
    level = MeasuredCell(**base, start_delta=0.0, start_sd=0.01, start_seeds_above=1)  # a tie with the start model
    assert not level.pays and level.verdict == "no measurable difference"
    lost = MeasuredCell(**base, start_delta=0.05, start_sd=0.01, start_seeds_above=3)
    assert not lost.pays and lost.verdict == "cost" and not MeasuredCell(**{**base, "delta": 0.01}).pays
    advice = Advice(category="upcycle", recipe="paper", schedule="cosine", growth_at=0.25, tokens_per_param=5.7,
                    cell=lost, near=True, init="copy")
    assert not advice.pays and "above the model it grew from continued on the same FLOPs" in advice.message()
    with pytest.raises(ValueError, match="give all three"):
        MeasuredCell(**base, start_delta=0.05)


@pytest.mark.parametrize("stage, category", [({"n_expert": 8}, "experts"),
                                             ({"n_expert": 8, "n_expert_per_token": 4}, "experts+topk")])
def test_sparkling_plan_of_a_more_experts_run_names_its_measured_cell(tmp_path, stage, category):
    """MoE -> 2x experts on the measured MoE (E=4, K=2): ``n_expert`` alone gets its own cell (it ended above the E=8
    MoE from scratch: a warning), with K doubled the ``experts+topk`` cell; never the upcycle ones."""
    import yaml

    from lightning_sparkling.pretrain.advice.measured import load_map
    from lightning_sparkling.pretrain.cli import parse, plan

    moe = {**QUICK["model_config"], "mlp_class_name": "LLaMAMoE", "n_expert": 4, "n_expert_per_token": 2,
           "moe_intermediate_size": 128}
    path = tmp_path / "experts.yaml"
    path.write_text(yaml.safe_dump({**QUICK, "model_config": moe,
                                    "growth": {"stages": [{"at_step": 250, **stage, "rewarmup_steps": 50}]}}))
    _, run, _ = parse(["--config", str(path)])
    report = plan(run, print_report=False)
    (cell,) = [c for c in load_map() if c.category == category]
    text = report["regime_warning"] or report["regime_advice"]
    assert f"{category} (expert_init copy), paper, cosine, growth at 25%" in text
    assert f"Δ {cell.delta:+.3f} ± {cell.sd:.3f}" in text and "upcycle" not in text
    assert (report["regime_warning"] is not None) == (not cell.pays)
    # experts+topk: Δ -0.009 ± 0.016 with 1/3 seeds above is a tie (issue 52), never "paid"
    assert ("growth paid there" in text) == cell.pays
    assert category != "experts+topk" or "no measurable difference" in text
