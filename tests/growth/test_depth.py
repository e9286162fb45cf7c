"""Depth growth (``paper_stage(n_layer=...)``): source maps, function preservation on every litgpt family the width
breadth test covers, refusals before anything changes, the optimizer patch of new blocks, and, inside a Lightning
fit, the new blocks' applied learning rate (read from SGD updates) at accumulation 1 and 2, bit-exact resume
across a depth growth followed by a width growth, and an atomic rollback."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from litgpt import GPT

from lightning_sparkling import GrowthStage, WidthGrowthCallback, grow_model, rewarmup_lr
from lightning_sparkling.growth.depth_maps import depth_source_map
from lightning_sparkling.growth.optim_state import plan_optimizer_patch, plan_param_moves
from lightning_sparkling.growth.plan import GrowthError, plan_growth
from lightning_sparkling.growth.schedules import WarmupCosineLambda
from lightning_sparkling.growth.symmetry import copy_specs, symmetry_metrics

from _measure import RecordSteps, applied_lr
from _tiny import TinyModule, assert_states_equal, make_trainer, paper_stage, tiny_config
from conftest import (
    assert_unchanged,
    gemma_config,
    latent_attention_config,
    llama_config,
    make_gpt,
    make_tokens,
    moe_config,
    neox_config,
    olmo2_config,
    olmo_config,
    pure_moe_config,
    qk_norm_config,
    snapshot,
)

FAMILIES = {
    "llama": llama_config, "neox": neox_config, "moe": moe_config, "pure_moe": pure_moe_config,
    "gemma": gemma_config, "olmo": olmo_config, "olmo2": olmo2_config, "qk_norm": qk_norm_config,
    # LayerNorm post-norms with a bias: LayerNorm(0) = bias, so the -zero inits zero that bias too
    "neox_post_norms": lambda **kw: neox_config(post_attention_norm=True, post_mlp_norm=True, **kw),
}
ORDERS = ("stack", "interleave", "middle")


# ----------------------------------------------------------------------------------------------- source maps
@pytest.mark.parametrize("old, new, order, source, fresh", [
    (2, 4, "stack", (0, 1, 0, 1), (0, 0, 1, 1)),
    (3, 5, "stack", (0, 1, 2, 0, 1), (0, 0, 0, 1, 1)),
    (2, 7, "stack", (0, 1, 0, 1, 0, 1, 0), (0, 0, 1, 1, 1, 1, 1)),
    (2, 4, "interleave", (0, 0, 1, 1), (0, 1, 0, 1)),
    (4, 6, "interleave", (0, 1, 1, 2, 3, 3), (0, 0, 1, 0, 0, 1)),  # extra copies spread: blocks 1 and 3
    (3, 7, "interleave", (0, 0, 1, 1, 1, 2, 2), (0, 1, 0, 1, 1, 0, 1)),  # one extra: the centre block
    (4, 5, "middle", (0, 1, 1, 2, 3), (0, 0, 1, 0, 0)),
    (5, 7, "middle", (0, 1, 1, 2, 2, 3, 4), (0, 0, 1, 0, 1, 0, 0)),  # a centred window of 2
    (2, 4, "middle", (0, 0, 1, 1), (0, 1, 0, 1)),
])
def test_source_maps_including_non_multiples(old, new, order, source, fresh):
    got_source, got_fresh = depth_source_map(old, new, order)
    assert got_source == source
    assert got_fresh == tuple(bool(f) for f in fresh)
    # every old block is kept exactly once, in order
    kept = [s for s, f in zip(got_source, got_fresh) if not f]
    assert kept == list(range(old))


# ----------------------------------------------------------------------------------------------- function
@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("depth_init", ["copy-zero", "random-zero"])
def test_zero_inits_keep_the_logits_on_every_family(family, order, depth_init):
    config = FAMILIES[family](n_layer=3)
    if family == "moe" and order == "stack":  # dense first block: refused (test below)
        order = "interleave"
    model = make_gpt(config)
    x = make_tokens(config)
    with torch.no_grad():
        before = model(x)
    result = grow_model(model, paper_stage(0, n_layer=7, depth_init=depth_init, depth_order=order))
    with torch.no_grad():
        after = model(x)
    assert model.config.n_layer == 7 and len(model.transformer.h) == 7
    torch.testing.assert_close(after, before, atol=1e-5, rtol=0)
    # a plain litgpt GPT of the grown config: the state dict loads strictly, and computes the same
    fresh = GPT(model.config)
    fresh.load_state_dict(model.state_dict(), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(fresh(x), after, atol=1e-6, rtol=0)
    new_blocks = result.plan.depth.new_blocks
    assert len(new_blocks) == 4
    assert len(result.added) == sum(len(list(model.transformer.h[j].parameters())) for j in new_blocks)


@pytest.mark.parametrize("family", ["llama", "neox", "gemma", "moe"])
def test_depth_and_width_in_one_stage_keep_the_logits(family):
    config = FAMILIES[family](n_layer=2)
    model = make_gpt(config)
    x = make_tokens(config)
    with torch.no_grad():
        before = model(x)
    widths = dict(n_embd=64, intermediate_size=128)
    if family == "moe":
        widths["moe_intermediate_size"] = 32
    grow_model(model, paper_stage(0, n_layer=4, depth_order="interleave", **widths))
    with torch.no_grad():
        torch.testing.assert_close(model(x), before, atol=1e-5, rtol=0)
    assert (model.config.n_layer, model.config.n_embd) == (4, 64)
    GPT(model.config).load_state_dict(model.state_dict(), strict=True)


def test_copy_stack_new_blocks_equal_their_sources_and_own_their_storage():
    model = make_gpt(llama_config(n_layer=3))
    result = grow_model(model, paper_stage(0, n_layer=5, depth_init="copy", depth_order="stack"))
    blocks = model.transformer.h
    for j, source in ((3, 0), (4, 1)):
        for (name, p), (_, q) in zip(blocks[j].named_parameters(), blocks[source].named_parameters()):
            assert torch.equal(p, q), name
            assert p.data_ptr() != q.data_ptr(), f"block {j} {name} shares storage with block {source}"
    # the kept blocks are the very same modules and parameters
    assert all(result.added[f"transformer.h.3.{n}"][0] is p for n, p in blocks[0].named_parameters())
    assert not result.old_params  # nothing was replaced: stack keeps every old block where it was


def test_copy_zero_zeroes_exactly_the_output_projections():
    model = make_gpt(neox_config(n_layer=2))
    grow_model(model, paper_stage(0, n_layer=3, depth_order="stack"))
    new, source = model.transformer.h[2], model.transformer.h[0]
    zeroed = {n for n, p in new.named_parameters() if not p.any()}
    assert zeroed == {"attn.proj.weight", "attn.proj.bias", "mlp.proj.weight", "mlp.proj.bias"}
    for (name, p), (_, q) in zip(new.named_parameters(), source.named_parameters()):
        if name not in zeroed:
            assert torch.equal(p, q), name


def test_interleave_moves_kept_blocks_and_sets_their_index():
    model = make_gpt(llama_config(n_layer=2))
    old_blocks = list(model.transformer.h)
    grow_model(model, paper_stage(0, n_layer=4, depth_order="interleave"))
    assert model.transformer.h[0] is old_blocks[0] and model.transformer.h[2] is old_blocks[1]
    assert [b.attn.block_idx for b in model.transformer.h] == [0, 1, 2, 3]


def test_random_zero_draws_litgpt_init_from_the_seed():
    a, b = make_gpt(llama_config(n_layer=2)), make_gpt(llama_config(n_layer=2))
    grow_model(a, paper_stage(0, n_layer=3, depth_init="random-zero"), seed=3)
    grow_model(b, paper_stage(0, n_layer=3, depth_init="random-zero"), seed=3)
    new = a.transformer.h[2]
    assert torch.equal(new.attn.qkv.weight, b.transformer.h[2].attn.qkv.weight)
    assert abs(new.attn.qkv.weight.std().item() - (2 / 5 / 32) ** 0.5) < 0.02
    assert torch.equal(new.norm_1.weight, torch.ones(32)) and not new.attn.proj.weight.any()
    assert not torch.equal(new.attn.qkv.weight, a.transformer.h[0].attn.qkv.weight)


# ----------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("keys, message", [
    (dict(n_layer=2), "n_layer=2 does not change the model"),
    (dict(n_layer=1), "n_layer=1 shrinks the model"),
])
def test_a_depth_that_is_not_larger_is_refused_before_anything_changes(keys, message):
    model = make_gpt(llama_config(n_layer=2))
    snap = snapshot(model)
    with pytest.raises(GrowthError, match=message):
        grow_model(model, paper_stage(0, **keys))
    assert_unchanged(model, snap)


@pytest.mark.parametrize("keys, message", [
    (dict(n_layer=4, depth_order="top"), r"depth_order='top'\): choose one of stack, interleave, middle"),
    (dict(n_layer=4, depth_init="zero"), r"depth_init='zero'\): choose one of copy-zero, copy, random-zero"),
    (dict(n_layer=0), r"n_layer=0\): a layer count must be a positive integer"),
    (dict(n_layer=4, depth_init="random-zero", symmetry_target=0.5), "copies nothing"),
])
def test_bad_depth_settings_are_refused_naming_the_value(keys, message):
    with pytest.raises(ValueError, match=message):
        paper_stage(0, **keys)


def test_stack_on_a_model_with_dense_first_blocks_is_refused_naming_the_fix():
    model = make_gpt(moe_config(n_layer=2))
    snap = snapshot(model)
    with pytest.raises(GrowthError, match="first_k_dense_replace=1.*use depth_order='interleave' or 'middle'"):
        grow_model(model, paper_stage(0, n_layer=4, depth_order="stack"))
    assert_unchanged(model, snap)
    grow_model(model, paper_stage(0, n_layer=4, depth_order="interleave"))
    assert model.config.first_k_dense_replace == 2  # block 0 and its copy


def test_latent_attention_is_refused():
    with pytest.raises(GrowthError, match="latent attention"):
        plan_growth(latent_attention_config(), paper_stage(0, n_layer=4))


# ----------------------------------------------------------------------------------------------- optimizer
@pytest.mark.parametrize("recipe", ["asymmetric", "copy", "drop"])
def test_new_blocks_join_their_sources_param_group_with_grown_state(recipe):
    model = make_gpt(llama_config(n_layer=2))
    decay = [p for p in model.parameters() if p.ndim == 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}])
    model(make_tokens(model.config)).sum().backward()
    opt.step()
    result = grow_model(model, paper_stage(1, n_layer=3, depth_init="copy", optimizer_state=recipe))
    patch = plan_optimizer_patch(opt, result, recipe)
    patch.apply()
    names = {id(p): n for n, p in model.named_parameters()}
    for g, group in enumerate(opt.param_groups):
        assert all((p.ndim == 2) == (g == 0) for p in group["params"])
    assert {names[id(p)] for group in opt.param_groups for p in group["params"]} == set(names.values())
    for name, (source, new) in result.added.items():
        src, got = opt.state[source], opt.state[new]
        assert torch.equal(got["step"], src["step"]) and got["step"] is not src["step"]
        for key in ("exp_avg", "exp_avg_sq"):
            want = src[key] if recipe == "copy" else torch.zeros_like(src[key])
            assert torch.equal(got[key], want), (name, key)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    patch.undo()
    assert sum(len(g["params"]) for g in opt.param_groups) == len(decay) + len(no_decay)
    assert all(p in opt.state for p in decay + no_decay) and len(opt.state) == len(decay) + len(no_decay)
    assert before  # the grown model itself is untouched by the optimizer undo


def test_the_shared_parameter_moves_take_any_state_construction():
    """``plan_param_moves`` (what the one-device, FSDP2 and FSDP1 planners share) with FSDP1's kind of state: scalars
    only. It asks for replacements by param group, then new blocks; a new block's step is a clone; a group that
    gains new blocks lists them in the grown model's parameter order."""
    model = make_gpt(llama_config(n_layer=2))
    opt = torch.optim.AdamW([{"params": [p for p in model.parameters() if p.ndim == 2]},
                             {"params": [p for p in model.parameters() if p.ndim < 2]}])
    model(make_tokens(model.config)).sum().backward()
    opt.step()
    result = grow_model(model, paper_stage(1, n_layer=4, depth_init="copy", depth_order="interleave"))
    asked = []

    def scalars(old, name, new):
        asked.append(name)
        return {k: v for k, v in opt.state[old].items() if v.ndim == 0}

    patch = plan_param_moves(opt, result, scalars)
    replaced = [name for _, _, _, new in patch.replacements for name, p in result.new_params.items() if p is new]
    assert asked == replaced + list(result.added)
    for source, new in result.added.values():
        assert torch.equal(patch.new_state[new]["step"], opt.state[source]["step"])
        assert patch.new_state[new]["step"] is not opt.state[source]["step"]
    order = [id(p) for p in model.parameters()]
    for g, params in patch.regrouped.items():
        ids = [id(p) for p in params]
        assert ids == [i for i in order if i in ids], g
    assert sum(map(len, patch.regrouped.values())) == len(order)


# ----------------------------------------------------------------------------------------------- symmetry
def test_depth_symmetry_is_one_at_growth_for_copies_and_absent_for_random():
    model = make_gpt(llama_config(n_layer=2))
    result = grow_model(model, paper_stage(0, n_layer=4, depth_init="copy-zero", depth_order="interleave"))
    specs = copy_specs(result.plan)
    assert set(specs) == {"n_layer"}
    params = dict(model.named_parameters())
    names = [n for pair in specs["n_layer"].pairs for n in pair]
    metrics = symmetry_metrics(specs, ((n, params[n]) for n in names), "symmetry/stage_0")
    assert metrics["symmetry/stage_0/n_layer"] == pytest.approx(1.0, abs=1e-6)
    with torch.no_grad():
        model.transformer.h[1].attn.qkv.weight.neg_()  # a copy that went the other way
    metrics = symmetry_metrics(specs, ((n, params[n]) for n in names), "symmetry/stage_0")
    assert metrics["symmetry/stage_0/n_layer"] < 0.9
    model = make_gpt(llama_config(n_layer=2))
    assert not copy_specs(grow_model(model, paper_stage(0, n_layer=4, depth_init="random-zero")).plan)


# ----------------------------------------------------------------------------------------------- in a fit
MAX_STEPS = 20
DEPTH_AT, WIDTH_AT = 6, 12


def _stages(order: str = "interleave") -> list[GrowthStage]:
    return [paper_stage(DEPTH_AT, n_layer=4, depth_order=order, depth_init="copy", rewarmup_ratio=2.0,
                        rewarmup_steps=3),
            paper_stage(WIDTH_AT, n_embd=48, intermediate_size=96, rewarmup_ratio=1.5, rewarmup_steps=3)]


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
def test_new_blocks_follow_their_rewarmup_and_old_blocks_the_schedule(accumulate):
    """SGD: the applied LR of every entry of a new block (read from the parameters) is the depth stage's re-warmup
    at every step after the growth; the kept blocks' entries follow the module's schedule."""
    lr = 0.05
    module = TinyModule(optimizer="sgd", lr=lr, max_steps=MAX_STEPS, accumulate=accumulate)
    recorder = RecordSteps()
    trainer = make_trainer([recorder, WidthGrowthCallback(_stages()[:1])], max_steps=MAX_STEPS,
                           accumulate=accumulate, precision="64-true")
    trainer.fit(module)
    schedule = WarmupCosineLambda(5, MAX_STEPS, 0.1)

    def new_lr(s):
        return rewarmup_lr(s, growth_step=DEPTH_AT, lr_at_growth=lr * schedule(DEPTH_AT), ratio=2.0, warmup_steps=3,
                           total_steps=MAX_STEPS, min_lr=lr * 0.1)

    checked = {"new": 0, "old": 0}
    for record in recorder.records:
        step = record["step"]
        for name, before in record["before"].items():
            if name not in record["grad"] or before.ndim < 2:
                continue
            block = name.split(".")[2] if name.startswith("transformer.h.") else None
            is_new = step >= DEPTH_AT and block in ("1", "3")  # interleave 2 -> 4: new blocks at 1 and 3
            want = new_lr(step) if is_new else lr * schedule(step)
            got = applied_lr(before, record["grad"][name], record["after"][name], torch.ones_like(before, dtype=bool))
            assert got.numel() > 0
            assert torch.allclose(got, torch.full_like(got, want), rtol=1e-6, atol=0), (step, name, want)
            checked["new" if is_new else "old"] += got.numel()
    assert min(checked.values()) > 1000
    assert new_lr(DEPTH_AT + 3) != pytest.approx(lr * schedule(DEPTH_AT + 3))


def _fit(module, stages, **kwargs):
    growth = WidthGrowthCallback(stages)
    callbacks = [growth] + kwargs.pop("callbacks", [])
    ckpt_path = kwargs.pop("ckpt_path", None)
    trainer = make_trainer(callbacks, **kwargs)
    trainer.fit(module, ckpt_path=ckpt_path)
    return trainer, growth


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
def test_resume_bit_exact_across_a_depth_growth_then_a_width_growth(tmp_path: Path, accumulate):
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    reference = TinyModule(max_steps=MAX_STEPS, accumulate=accumulate)
    trainer, growth = _fit(reference, _stages(), max_steps=MAX_STEPS, accumulate=accumulate, callbacks=[ckpt],
                           enable_checkpointing=True)
    assert growth.grown_stages == 2 and reference.model.config.n_layer == 4
    expected = {n: t.detach().clone() for n, t in reference.model.state_dict().items()}
    for step in (3, DEPTH_AT, 9, WIDTH_AT, 15):  # before, at, between and after the growths
        resumed = TinyModule(max_steps=MAX_STEPS, accumulate=accumulate)
        _fit(resumed, _stages(), max_steps=MAX_STEPS, accumulate=accumulate,
             ckpt_path=str(tmp_path / f"step={step}.ckpt"))
        assert_states_equal(resumed.model.state_dict(), expected, f"resume from step {step}")


@pytest.mark.slow
def test_checkpoint_after_depth_growth_is_a_plain_litgpt_state_dict(tmp_path: Path):
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=DEPTH_AT + 1, save_top_k=-1, filename="{step}")
    module = TinyModule(max_steps=10)
    _fit(module, _stages()[:1], max_steps=10, callbacks=[ckpt], enable_checkpointing=True)
    state = torch.load(tmp_path / f"step={DEPTH_AT + 1}.ckpt", weights_only=False)["state_dict"]
    gpt = GPT(tiny_config(n_layer=4))
    gpt.load_state_dict({k.removeprefix("model."): v for k, v in state.items()}, strict=True)


@pytest.mark.slow
def test_a_failed_depth_growth_leaves_the_model_and_optimizer_as_they_were(monkeypatch):
    from lightning_sparkling.callbacks.growth import GrowthFailedError, WidthGrowthCallback as CB

    module = TinyModule(max_steps=12)
    seen = {}

    def fail(self, pl_module, gpt, batch):
        seen["blocks"] = len(gpt.transformer.h)
        raise RuntimeError("boom")

    class Snap(RecordSteps):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == DEPTH_AT:
                seen["params"] = [p for g in trainer.optimizers[0].param_groups for p in g["params"]]
                seen["state"] = {id(p): {k: v.clone() for k, v in s.items()}
                                 for p, s in trainer.optimizers[0].state.items()}
                seen["weights"] = {n: p.detach().clone() for n, p in pl_module.model.named_parameters()}

    monkeypatch.setattr(CB, "_check_loss", fail)
    trainer = make_trainer([Snap(), WidthGrowthCallback(_stages()[:1])], max_steps=12)
    with pytest.raises(GrowthFailedError, match="n_layer"):
        trainer.fit(module)
    assert seen["blocks"] == 4  # the growth did happen before the check failed
    assert len(module.model.transformer.h) == 2 and module.model.config.n_layer == 2
    opt = trainer.optimizers[0]
    assert [p for g in opt.param_groups for p in g["params"]] == seen["params"]
    assert {id(p) for p in opt.state} == set(seen["state"])
    for p, s in opt.state.items():
        for k, v in s.items():
            assert torch.equal(v, seen["state"][id(p)][k])
    for n, p in module.model.named_parameters():
        assert torch.equal(p, seen["weights"][n])


def test_estimate_compute_counts_the_depth_change():
    from lightning_sparkling import estimate_compute
    from lightning_sparkling.growth.compute import count_params

    config = llama_config(n_layer=2)
    est = estimate_compute(config, paper_stage(30, n_layer=4), total_steps=100, tokens_per_step=64)
    small, large = count_params(config)[0], count_params(llama_config(n_layer=4))[0]
    assert est.active_params == (small, large)
    assert est.flops == pytest.approx(6 * 64 * (small * 30 + large * 70))
    assert est.flops_from_scratch == pytest.approx(6 * 64 * large * 100)


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
def test_symmetry_loop_on_a_depth_stage_boosts_the_new_blocks_by_their_measured_cosine(accumulate):
    """The loop's decisions for a depth stage follow the cosine of each copied block to its source, measured here
    from the recorded weights, and the boost reaches the applied LR of the new blocks (SGD updates)."""
    lr, target, interval = 0.05, 0.9999, 2
    stage = paper_stage(DEPTH_AT, n_layer=4, depth_order="stack", depth_init="copy", rewarmup_ratio=1.0,
                        rewarmup_steps=0, symmetry_target=target, symmetry_interval=interval, symmetry_max_boost=4.0)
    module = TinyModule(optimizer="sgd", lr=lr, max_steps=MAX_STEPS, accumulate=accumulate)
    recorder = RecordSteps()
    trainer = make_trainer([recorder, WidthGrowthCallback(stage)], max_steps=MAX_STEPS, accumulate=accumulate,
                           precision="64-true")
    trainer.fit(module)
    schedule = WarmupCosineLambda(5, MAX_STEPS, 0.1)
    boost, done, seen = 1.0, False, []
    for record in recorder.records:
        step = record["step"]
        if step > DEPTH_AT and not done and (step - DEPTH_AT) % interval == 0:
            # the loop checks after the optimizer step that made global_step == step: the weights before this step
            w = record["before"]
            cosines = [torch.nn.functional.cosine_similarity(w[f"transformer.h.{j}.{rest}"].flatten(),
                                                             w[f"transformer.h.{j - 2}.{rest}"].flatten(), dim=0)
                       for j in (2, 3) for rest in ("attn.qkv.weight", "attn.proj.weight", "mlp.fc_1.weight",
                                                    "mlp.fc_2.weight", "mlp.proj.weight")]
            if float(torch.stack(cosines).mean()) < target:
                done = True
            else:
                boost = min(2 * boost, 4.0)
        if step < DEPTH_AT:
            continue
        name = "transformer.h.3.mlp.fc_1.weight"
        got = applied_lr(record["before"][name], record["grad"][name], record["after"][name],
                         torch.ones_like(record["before"][name], dtype=bool))
        want = boost * rewarmup_lr(step, growth_step=DEPTH_AT, lr_at_growth=lr * schedule(DEPTH_AT), ratio=1.0,
                                   warmup_steps=0, total_steps=MAX_STEPS, min_lr=lr * 0.1)
        assert torch.allclose(got, torch.full_like(got, want), rtol=1e-6), (step, boost)
        seen.append(boost)
    assert 1.0 in seen and max(seen) > 1.0  # the boost really changed the applied LR


@pytest.mark.slow
def test_a_width_stage_entries_keep_their_rewarmup_in_blocks_a_later_depth_growth_moves():
    """Width at step 6, then depth (interleave) at step 12: old block 1 moves to position 2, and its entries new
    at step 6 keep the width stage's re-warmup, read from the parameters; new blocks follow the depth stage's."""
    lr, width_at, depth_at = 0.05, 6, 12
    stages = [paper_stage(width_at, n_embd=48, rewarmup_ratio=2.0, rewarmup_steps=3),
              paper_stage(depth_at, n_layer=4, depth_order="interleave", rewarmup_ratio=1.5, rewarmup_steps=2)]
    module = TinyModule(optimizer="sgd", lr=lr, max_steps=MAX_STEPS)
    recorder = RecordSteps()
    trainer = make_trainer([recorder, WidthGrowthCallback(stages)], max_steps=MAX_STEPS, precision="64-true")
    trainer.fit(module)
    schedule = WarmupCosineLambda(5, MAX_STEPS, 0.1)

    def stage_lr(at, ratio, warmup):
        return lambda s: rewarmup_lr(s, growth_step=at, lr_at_growth=lr * schedule(at), ratio=ratio,
                                     warmup_steps=warmup, total_steps=MAX_STEPS, min_lr=lr * 0.1)

    width_lr, depth_lr = stage_lr(width_at, 2.0, 3), stage_lr(depth_at, 1.5, 2)
    checked = 0
    for record in recorder.records:
        step = record["step"]
        if step <= depth_at:
            continue
        for name, want in (("transformer.h.2.attn.qkv.weight", width_lr(step)),  # old block 1, moved
                           ("transformer.h.3.attn.qkv.weight", depth_lr(step))):  # the copy of old block 1
            w = record["before"][name]
            mask = torch.zeros_like(w, dtype=bool)
            mask[:, 32:] = True  # fan-in columns new at the width growth
            got = applied_lr(w, record["grad"][name], record["after"][name], mask)
            assert got.numel() > 0
            assert torch.allclose(got, torch.full_like(got, want), rtol=1e-6), (step, name)
            checked += 1
        old = record["before"]["transformer.h.2.attn.qkv.weight"]
        mask = torch.zeros_like(old, dtype=bool)
        mask[:, :32] = True  # entries older than both growths: the module's schedule
        got = applied_lr(old, record["grad"]["transformer.h.2.attn.qkv.weight"],
                         record["after"]["transformer.h.2.attn.qkv.weight"], mask)
        assert torch.allclose(got, torch.full_like(got, lr * schedule(step)), rtol=1e-6), step
    assert checked == 2 * (MAX_STEPS - depth_at - 1)
    assert width_lr(depth_at + 2) != pytest.approx(depth_lr(depth_at + 2))
