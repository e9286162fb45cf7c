"""The paper's comparison baselines as growth options (appendix "Comparison to Prior Function-Preserving
Symmetry-Breaking Heuristics" and "Comparison to Prior Dynamics-Based Strategies"): validation, the function each
keeps, the copy symmetry each breaks (or, by design, does not), the scaled optimizer state, the CLI keys and
``sparkling plan``. The learning-rate options are checked step by step in test_baselines_schedules.py."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from lightning_sparkling import GrowthStage, WidthGrowthCallback, grow_model
from lightning_sparkling.growth.optim_state import plan_optimizer_patch
from lightning_sparkling.growth.plan import plan_growth
from lightning_sparkling.growth.scaling import copy_source_index, make_generator, split_shares
from lightning_sparkling.growth.stage import DEFAULT_SPLIT_RATIO, check_stage_sequence

from _tiny import TinyModule, make_trainer, paper_stage
from conftest import llama_config, make_gpt, make_tokens, moe_config, neox_config

BASELINE_KEYS = ("split", "split_ratio", "perturb", "rewarmup_scope", "decay_speedup")


# ------------------------------------------------------------------------------------------------------------ stage
def test_defaults_are_the_recipe_and_round_trip():
    stage = paper_stage(10, n_embd=64)
    assert (stage.split, stage.split_ratio, stage.perturb, stage.rewarmup_scope, stage.decay_speedup) == (
        "even", 1 / 3, 0.0, "new", 0.0)
    assert not stage.changes_baseline
    full = paper_stage(10, n_embd=64, init="zero-copy", split="uneven", split_ratio=0.25, perturb=0.1,
                       rewarmup_scope="all", decay_speedup=0.5, optimizer_state="scaled")
    assert GrowthStage(**full.to_dict()) == full and full.changes_baseline
    assert {k: full.to_dict()[k] for k in BASELINE_KEYS} == dict(split="uneven", split_ratio=0.25, perturb=0.1,
                                                                 rewarmup_scope="all", decay_speedup=0.5)


@pytest.mark.parametrize("kwargs,match", [
    (dict(split="half"), r"split='half'.*even, uneven, random"),
    (dict(split=None), r"split=None.*even, uneven, random"),
    (dict(split="uneven", split_ratio=0), r"split_ratio=0.*\(0, 1\)"),
    (dict(split="uneven", split_ratio=1.0), r"split_ratio=1.0.*\(0, 1\)"),
    (dict(split="uneven", split_ratio=float("nan")), r"split_ratio=nan.*\(0, 1\)"),
    (dict(split="uneven", split_ratio="1:2"), r"split_ratio='1:2'.*\(0, 1\)"),
    (dict(split="random", split_ratio=0.25), r"split_ratio=0.25.*only used with split='uneven'"),
    (dict(perturb=-0.1), r"perturb=-0.1.*>= 0"),
    (dict(perturb=float("inf")), r"perturb=inf.*finite"),
    (dict(perturb=True), r"perturb=True"),
    (dict(split="uneven", init="copy-random"), r"split='uneven'.*'copy-random' does not copy the fan-in side"),
    (dict(split="random", init="random-zero"), r"split='random'.*'random-zero'"),
    (dict(perturb=0.1, init="zero-random"), r"perturb=0.1.*'zero-random'"),
    (dict(rewarmup_scope="old"), r"rewarmup_scope='old'.*new, all"),
    (dict(rewarmup_scope="all", rewarmup_ratio=None), r"rewarmup_scope='all'.*rewarmup_ratio is None"),
    (dict(decay_speedup=1), r"decay_speedup=1.*\[0, 1\)"),
    (dict(decay_speedup=-0.25), r"decay_speedup=-0.25.*\[0, 1\)"),
    (dict(decay_speedup="25%"), r"decay_speedup='25%'"),
    (dict(optimizer_state="scaled-copy"), r"optimizer_state='scaled-copy'.*scaled"),
])
def test_refused_values_name_the_key_value_and_range(kwargs, match):
    with pytest.raises(ValueError, match=match):
        paper_stage(10, n_embd=64, **kwargs)


@pytest.mark.parametrize("init", ["copy-copy", "random-copy", "zero-copy"])
def test_split_and_perturb_accept_every_copied_fan_in(init):
    stage = paper_stage(10, n_embd=64, init=init, split="random", perturb=0.2)
    assert stage.fan_in_init == "copy"


def test_stage_sequence():
    check_stage_sequence([paper_stage(5, n_embd=64), paper_stage(9, n_embd=96, decay_speedup=0.25)])
    with pytest.raises(ValueError, match="decay_speedup=0.25.*only the last stage"):
        check_stage_sequence([paper_stage(5, n_embd=64, decay_speedup=0.25), paper_stage(9, n_embd=96)])


# ------------------------------------------------------------------------------------------------------------ math
def test_uneven_shares_sum_to_the_even_group_and_keep_the_ratio():
    d, d_new = 6, 15  # 2.5x: every channel copied once, three of them twice
    src = copy_source_index(d, d_new, make_generator(0, "t"))
    for split, ratio in (("uneven", DEFAULT_SPLIT_RATIO), ("uneven", 0.2), ("random", None)):
        kwargs = dict(ratio=ratio) if ratio else dict(generator=make_generator(0, "r"))
        m = split_shares(d, d_new, src, split, **kwargs)
        assert m.shape == (d_new,) and m.dtype == torch.float64
        copies = torch.bincount(src, minlength=d)
        for s in range(d):
            group = torch.cat([torch.tensor([s]), d + torch.nonzero(src == s).flatten()])
            assert float(m[group].sum()) == pytest.approx(1 + int(copies[s]))  # what the even split gives
            copy_share = m[d + int(torch.nonzero(src == s)[0])]
            r = float(m[s] / (m[s] + copy_share))  # source : each copy = r : 1 - r
            if ratio:
                assert r == pytest.approx(ratio)
            else:
                assert 0.1 <= r <= 0.5
    one_copy = split_shares(4, 8, torch.arange(4), "uneven")
    assert one_copy.tolist() == pytest.approx([2 / 3] * 4 + [4 / 3] * 4)  # the paper's 1:2
    assert split_shares(4, 8, torch.arange(4), "even") is None
    a = split_shares(4, 8, torch.arange(4), "random", generator=make_generator(3, "x"))
    assert torch.equal(a, split_shares(4, 8, torch.arange(4), "random", generator=make_generator(3, "x")))
    assert len(set(a[:4].tolist())) == 4  # one ratio per channel


SPLIT_SETTINGS = [dict(split="uneven"), dict(split="uneven", split_ratio=0.1), dict(split="random"),
                  dict(perturb=0.1), dict(split="random", perturb=1.0)]


@pytest.mark.parametrize("settings", SPLIT_SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
@pytest.mark.parametrize("factory,widths,tied", [
    (llama_config, dict(n_embd=64, intermediate_size=128), False),
    (llama_config, dict(n_embd=64), True),
    (neox_config, dict(n_embd=96, intermediate_size=192), False),
    (moe_config, dict(n_embd=64, moe_intermediate_size=32), False),
])
def test_copy_copy_at_integer_ratio_keeps_the_logits(settings, factory, widths, tied):
    model = make_gpt(factory(), tie_embeddings=tied)
    x = make_tokens(model.config)
    with torch.no_grad():
        before = model(x)
    grow_model(model, paper_stage(0, **widths, **settings), seed=1)
    with torch.no_grad():
        after = model(x)
    assert torch.allclose(after, before, atol=2e-5, rtol=1e-5), (after - before).abs().max()


@pytest.mark.parametrize("settings", SPLIT_SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_at_non_integer_ratio_the_function_is_the_even_splits(settings):
    """1.5x: copy-copy is not function preserving (alpha keeps the RMS), but the split and the perturbation leave
    each group's sum, hence the output, what the even split gives."""
    config = llama_config()
    outputs = []
    for extra in ({}, settings):
        model = make_gpt(config).double()
        grow_model(model, paper_stage(0, n_embd=48, intermediate_size=96, **extra), seed=2)
        with torch.no_grad():
            outputs.append(model(make_tokens(config)))
    assert torch.allclose(outputs[0], outputs[1], atol=1e-10)


def test_split_and_perturb_change_the_copies_as_specified():
    base = make_gpt(llama_config())
    grown = {}
    for name, extra in (("even", {}), ("uneven", dict(split="uneven")), ("perturb", dict(perturb=0.1))):
        model = make_gpt(llama_config())
        grow_model(model, paper_stage(0, intermediate_size=128, **extra), seed=0)
        grown[name] = model.transformer.h[0].mlp.proj.weight.detach()
    old = base.transformer.h[0].mlp.proj.weight.detach()
    even, uneven, perturbed = grown["even"], grown["uneven"], grown["perturb"]
    assert torch.allclose(even[:, :64], 0.5 * old) and torch.allclose(even[:, 64:], 0.5 * old)  # alpha = 1/2
    assert torch.allclose(uneven[:, :64], old / 3) and torch.allclose(uneven[:, 64:], 2 * old / 3)  # 1 : 2
    delta = perturbed[:, :64] - even[:, :64]
    assert torch.allclose(perturbed[:, 64:], even[:, 64:] - delta, atol=1e-7)  # +delta on source, -delta on copy
    relative = float(delta.std() / even.pow(2).mean().sqrt())
    assert relative == pytest.approx(0.1, rel=0.1)  # standard deviation relative to the RMS of the shares
    assert torch.allclose(perturbed[:, :64] + perturbed[:, 64:], old, atol=1e-7)  # the pair's sum is the old column


def test_perturb_is_seeded_and_independent_of_random_init_draws():
    def grown(seed, **extra):
        model = make_gpt(llama_config())
        grow_model(model, paper_stage(0, intermediate_size=128, init="random-copy", **extra), seed=seed)
        return model.transformer.h[0].mlp.fc_1.weight.detach(), model.transformer.h[0].mlp.proj.weight.detach()

    fc_plain, _ = grown(0)
    fc_pert, proj_a = grown(0, perturb=0.1)
    _, proj_b = grown(0, perturb=0.1)
    _, proj_c = grown(1, perturb=0.1)
    assert torch.equal(fc_plain, fc_pert)  # the perturbation has its own stream: random inits unchanged
    assert torch.equal(proj_a, proj_b) and not torch.equal(proj_a, proj_c)


# ------------------------------------------------------------------------------------------------------------ state
def _adam_after_steps(model, steps=3):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = make_tokens(model.config)
    for _ in range(steps):
        opt.zero_grad()
        model(x).logsumexp(-1).mean().backward()
        opt.step()
    return opt


@pytest.mark.parametrize("split", ["even", "uneven"])
def test_scaled_state_copies_and_scales_like_the_weights(split):
    name = "transformer.h.0.mlp.proj.weight"  # fan-out n_embd (rows), fan-in intermediate (columns)
    states = {}
    for recipe in ("scaled", "asymmetric-scaled", "copy"):
        model = make_gpt(llama_config())
        opt = _adam_after_steps(model)
        old_state = {k: v.clone() for k, v in opt.state[dict(model.named_parameters())[name]].items()}
        result = grow_model(model, paper_stage(0, n_embd=64, intermediate_size=128, split=split))
        plan_optimizer_patch(opt, result, recipe).apply()
        states[recipe] = opt.state[dict(model.named_parameters())[name]]
    alpha = result.plan.channels["intermediate_size"].alpha
    shares = (torch.tensor([2 / 3] * 64 + [4 / 3] * 64) if split == "uneven" else torch.ones(128)).view(1, -1)
    factor = alpha * shares  # the factor each column of the weight was multiplied by
    for key, power in (("exp_avg", 1), ("exp_avg_sq", 2)):
        copied = states["copy"][key]
        assert torch.equal(copied[:32, :64], old_state[key])
        assert torch.allclose(states["scaled"][key], copied * factor**power, rtol=1e-6, atol=0)
        # the symmetric baseline: new entries hold their (scaled) source's state ...
        scaled = states["scaled"][key]
        assert torch.allclose(scaled[:, 64:] / shares[:, 64:] ** power, scaled[:, :64] / shares[:, :64] ** power,
                              rtol=1e-6, atol=0)
        # ... while asymmetric-scaled scales old entries the same way and starts new entries at zero
        asym = states["asymmetric-scaled"][key]
        assert torch.allclose(asym[:32, :64], states["scaled"][key][:32, :64], rtol=1e-6, atol=0)
        assert not asym[:, 64:].any() and not asym[32:, :].any()
    assert states["scaled"]["step"] == states["copy"]["step"]


# ------------------------------------------------------------------------------------------------------------ symmetry
def _symmetry_after_fit(**stage_kwargs) -> dict[str, float]:
    module = TinyModule(max_steps=20)
    growth = WidthGrowthCallback(paper_stage(5, intermediate_size=128, rewarmup_steps=3, **stage_kwargs),
                                 symmetry_every_n_steps=1)
    make_trainer([growth], max_steps=20).fit(module)
    assert growth.last_symmetry
    return growth.last_symmetry


LOCKED = [  # symmetric optimizer state and the same LR for a copy and its source: the lock holds
    dict(optimizer_state="copy", rewarmup_ratio=None),
    dict(optimizer_state="scaled", rewarmup_ratio=None),
    dict(optimizer_state="copy", rewarmup_scope="all"),
    dict(optimizer_state="copy", rewarmup_ratio=None, decay_speedup=0.5),
]
BROKEN = [  # the heuristic itself makes copies and sources differ
    dict(optimizer_state="copy", rewarmup_ratio=None, split="uneven"),
    dict(optimizer_state="copy", rewarmup_ratio=None, split="random"),
    dict(optimizer_state="copy", rewarmup_ratio=None, perturb=0.05),
    dict(optimizer_state="scaled", rewarmup_ratio=None, split="uneven"),
    dict(rewarmup_scope="all"),  # with the asymmetric state (the default)
    dict(optimizer_state="asymmetric-scaled", rewarmup_ratio=None),
]


@pytest.mark.parametrize("kwargs", LOCKED, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_symmetric_recipes_stay_locked(kwargs):
    metrics = _symmetry_after_fit(**kwargs)
    assert min(metrics.values()) > 1 - 1e-6, metrics


@pytest.mark.parametrize("kwargs", BROKEN, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_symmetry_breaking_baselines_unlock_the_copies(kwargs):
    metrics = _symmetry_after_fit(**kwargs)
    assert max(metrics.values()) < 1 - 1e-4, metrics


# ------------------------------------------------------------------------------------------------------------ CLI
def test_stage_args_mirror_growth_stage():
    from lightning_sparkling.pretrain.config.schema import StageArgs

    from lightning_sparkling.growth.recipes import PAPER_KEYS

    stage_fields = {f.name: PAPER_KEYS.get(f.name, f.default) for f in dataclasses.fields(GrowthStage)
                    if f.name not in ("at_step", "extra", "_filled")}  # a recipe key: its paper value (issue 53)
    args_fields = {f.name: f.default for f in dataclasses.fields(StageArgs)}
    for name, default in stage_fields.items():
        assert name in args_fields and args_fields[name] == default, name
    # a registered axis' keys are flat in the CLI (tests/pretrain/test_cli_late_axis.py)
    assert "extra" not in args_fields


def test_cli_keys_plan_and_refusals(tmp_path, capsys):
    import yaml

    from lightning_sparkling.pretrain.cli import main, parse, plan

    with open("examples/quickstart.yaml") as fh:
        config = yaml.safe_load(fh)
    config["growth"]["recipe"] = "paper"  # the baselines split and perturb copied channels: copy-copy
    config["growth"]["stages"][0].update(split="uneven", split_ratio=0.25, perturb=0.02, rewarmup_scope="all",
                                         decay_speedup=0.25, optimizer_state="scaled")
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(config))
    _, run, dumped = parse(["--config", str(path)], "plan")
    stage = run.stages[0]
    assert (stage.split, stage.split_ratio, stage.perturb, stage.rewarmup_scope, stage.decay_speedup) == (
        "uneven", 0.25, 0.02, "all", 0.25)
    report = plan(run, print_report=False)["stages"][0]
    assert {k: report[k] for k in BASELINE_KEYS} == {k: getattr(stage, k) for k in BASELINE_KEYS}
    assert report["decay_end"] == 120 + round(0.75 * 180) and report["optimizer_state"] == "scaled"
    assert main(["plan", "--config", str(path)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert ("split uneven (0.25 : 0.75), perturb 0.02, rewarmup_scope all, decay_speedup 0.25 (the decay ends at "
            "step 255)") in printed
    for override, key in (('[{at_step: 120, n_embd: 128, split: "1:2"}]', "growth.stages[0].split"),
                          ('[{at_step: 120, n_embd: 128, init: copy-zero, perturb: 0.1}]', "growth.stages[0].perturb"),
                          ('[{at_step: 100, n_embd: 96, rewarmup_scope: all, rewarmup_steps: 5}, '
                           '{at_step: 150, n_embd: 128, rewarmup_steps: 5}]', "growth.stages[0].rewarmup_scope")):
        with pytest.raises(SystemExit):
            parse(["--config", str(path), "--growth.stages", override], "plan")
        assert f"error: {key}:" in capsys.readouterr().err


def test_growth_plan_carries_the_split():
    config = llama_config()
    plan = plan_growth(config, paper_stage(0, n_embd=64, intermediate_size=96, split="uneven"))
    for change in plan.channels.values():
        assert change.split is not None and change.split.shape == (change.new,)
        assert float(change.split.sum()) == pytest.approx(change.new)
    assert plan_growth(config, paper_stage(0, n_embd=64)).channels["n_embd"].split is None
    assert math.isclose(plan.channels["n_embd"].alpha, 0.5)  # alpha as before


# ------------------------------------------------------------------------------------------------------------ DDP/FSDP2
@pytest.mark.slow
def test_baseline_options_under_ddp_and_fsdp2_match_one_process(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "baselines_ddp_script.py"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    for mode in ("single", "ddp", "fsdp2"):
        proc = subprocess.run([sys.executable, str(script), str(tmp_path), mode], env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    single = torch.load(tmp_path / "single-rank0.pt")["state"]
    assert single["transformer.h.0.mlp.proj.weight"].shape == (64, 192)  # both stages applied
    for mode in ("ddp", "fsdp2"):
        ranks = [torch.load(tmp_path / f"{mode}-rank{r}.pt")["state"] for r in (0, 1)]
        for name in single:
            assert torch.equal(ranks[0][name], ranks[1][name]), (mode, name)
        num = sum(float((ranks[0][k].double() - single[k].double()).norm() ** 2) for k in single)
        den = sum(float(single[k].double().norm() ** 2) for k in single)
        assert (num / den) ** 0.5 < 1e-5, mode
