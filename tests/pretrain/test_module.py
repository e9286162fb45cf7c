"""LitGPTPretrainModule: litgpt init, AdamW and Muon training, the warmup-cosine schedule, validation metrics,
checkpoints of a different (grown) config, FLOPs, and shard_gpt."""

from __future__ import annotations

import math
from dataclasses import asdict

import lightning as L
import pytest
import torch
from litgpt import GPT, Config

from _litgpt_flops import litgpt_measured_flops
from lightning_sparkling.growth.schedules import WarmupCosineLambda
from lightning_sparkling.parallel import shard_gpt
from lightning_sparkling.pretrain.training.module import LitGPTPretrainModule
from lightning_sparkling.growth.compute import active_parameter_count
from lightning_sparkling.pretrain.model.gpt import build_gpt
from lightning_sparkling.pretrain.model.optim import resolve_optimizer

VOCAB = 64
SMALL = dict(n_embd=32, n_head=4, n_layer=2, block_size=16, vocab_size=VOCAB, padded_vocab_size=VOCAB,
             mlp_class_name="LLaMAMLP", intermediate_size=64, norm_class_name="RMSNorm", bias=False,
             rotary_percentage=1.0, parallel_residual=False)
BIG = {**SMALL, "n_embd": 64, "intermediate_size": 128, "head_size": 8}
ADAMW = {"class_path": "torch.optim.AdamW", "init_args": {"lr": 3e-3, "weight_decay": 0.1, "betas": [0.9, 0.95]}}
MUON = {"class_path": "torch.optim.Muon", "init_args": {"lr": 0.02, "weight_decay": 0.1}}




def _trainer(steps: int, **kwargs) -> L.Trainer:
    kwargs = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
              "enable_model_summary": False, "accelerator": "cpu", "limit_val_batches": 0, **kwargs}
    return L.Trainer(max_steps=steps, **kwargs)


def _loader(n_batches: int, *, batch_size: int = 4, seed: int = 0, repeat: bool = False):
    g = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, VOCAB, (batch_size if repeat else n_batches * batch_size, SMALL["block_size"] + 1),
                         generator=g)
    if repeat:
        rows = rows.repeat(n_batches, 1)
    return torch.utils.data.DataLoader(rows, batch_size=batch_size)


class _Losses(L.Callback):
    def __init__(self):
        self.losses, self.lrs = [], []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.lrs.append([g["lr"] for opt in trainer.optimizers for g in opt.param_groups])

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(float(trainer.callback_metrics["train_loss"]))


# ------------------------------------------------------------------ model
def test_model_is_a_plain_litgpt_gpt_with_litgpt_init():
    module = LitGPTPretrainModule(SMALL, max_steps=10, seed=3)
    model = module.model
    assert type(model) is GPT and model.config == Config(**SMALL)
    std = math.sqrt(2 / 5 / 32)
    assert abs(model.transformer.wte.weight.std().item() - std) < 0.15 * std
    proj = model.transformer.h[0].mlp.proj.weight
    assert abs(proj.std().item() - 1 / math.sqrt(32) / 2) < 0.15 * (1 / math.sqrt(32) / 2)
    assert torch.equal(model.transformer.h[0].norm_1.weight, torch.ones(32))
    same = LitGPTPretrainModule(SMALL, max_steps=10, seed=3).model
    other = LitGPTPretrainModule(SMALL, max_steps=10, seed=4).model
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), same.parameters()))
    assert not torch.equal(model.lm_head.weight, other.lm_head.weight)
    # configure_model is idempotent (no mesh: no sharding), and builds the model when it is missing
    module.configure_model()
    assert module.model is model
    module.model = None
    module.configure_model()
    assert all(torch.equal(a, b) for a, b in zip(module.model.parameters(), same.parameters()))
    assert [m for m in module.modules() if isinstance(m, GPT)] == [module.model]


def test_config_forms_and_tied_embeddings():
    assert LitGPTPretrainModule(Config(**SMALL), max_steps=1).model.config == Config(**SMALL)
    assert LitGPTPretrainModule("pythia-14m", max_steps=1).model.config.name == "pythia-14m"
    tied = LitGPTPretrainModule(SMALL, max_steps=1, tie_embeddings=True).model
    assert tied.transformer.wte.weight is tied.lm_head.weight
    with pytest.raises(ValueError, match="n_embdd"):
        LitGPTPretrainModule({**SMALL, "n_embdd": 3}, max_steps=1)


def test_bad_settings_name_the_setting():
    with pytest.raises(ValueError, match="lr_warmup_steps or lr_warmup_fraction"):
        LitGPTPretrainModule(SMALL, max_steps=10, lr_warmup_steps=1, lr_warmup_fraction=0.1)
    with pytest.raises(ValueError, match="lr_warmup_steps=20 is larger than max_steps=10"):
        LitGPTPretrainModule(SMALL, max_steps=10, lr_warmup_steps=20)
    with pytest.raises(ValueError, match="lr_warmup_fraction"):
        LitGPTPretrainModule(SMALL, max_steps=10, lr_warmup_fraction=1.5)
    with pytest.raises(ValueError, match="optimizer"):
        LitGPTPretrainModule(SMALL, "torch.optim.NoSuchThing", max_steps=10)
    with pytest.raises(ValueError, match="muon_adamw"):
        LitGPTPretrainModule(SMALL, "AdamW", max_steps=10, muon_adamw={"lr": 1e-3})
    with pytest.raises(ValueError, match="min_lr"):
        LitGPTPretrainModule(SMALL, ADAMW, max_steps=10, min_lr=1.0).configure_optimizers()
    with pytest.raises(ValueError, match="max_steps"):
        LitGPTPretrainModule(SMALL, ADAMW).configure_optimizers()


def test_resolve_optimizer():
    cls, args = resolve_optimizer(ADAMW)
    assert cls is torch.optim.AdamW and args == {"lr": 3e-3, "weight_decay": 0.1, "betas": (0.9, 0.95)}
    assert ADAMW["init_args"]["betas"] == [0.9, 0.95]  # the spec is not mutated
    assert resolve_optimizer("Muon")[0] is torch.optim.Muon
    assert resolve_optimizer("torch.optim.SGD") == (torch.optim.SGD, {})


# ------------------------------------------------------------------ training
def test_adamw_trains_a_few_steps_and_loss_decreases():
    module = LitGPTPretrainModule(SMALL, ADAMW, max_steps=20, lr_warmup_steps=2)
    assert module.automatic_optimization and module.gradient_clip_val == 1.0
    rec = _Losses()
    trainer = _trainer(20, callbacks=[rec])
    trainer.fit(module, _loader(20, repeat=True))
    assert trainer.global_step == 20 and len(rec.losses) == 20
    assert all(math.isfinite(x) for x in rec.losses)
    assert rec.losses[-1] < 0.6 * rec.losses[0]
    assert len(trainer.optimizers) == 1 and isinstance(trainer.optimizers[0], torch.optim.AdamW)
    # weight decay on every parameter (litgpt, the paper), one group
    (group,) = trainer.optimizers[0].param_groups
    assert group["weight_decay"] == 0.1 and len(group["params"]) == len(list(module.model.parameters()))


def test_muon_trains_with_adamw_for_non_matrix_params():
    module = LitGPTPretrainModule(SMALL, MUON, max_steps=20, lr_warmup_steps=2, muon_adamw={"lr": 3e-3})
    assert not module.automatic_optimization and module.gradient_clip_val is None
    rec = _Losses()
    trainer = _trainer(20, callbacks=[rec])
    trainer.fit(module, _loader(20, repeat=True))
    assert trainer.global_step == 20 and len(rec.losses) == 20  # one global step per optimizer step
    assert all(math.isfinite(x) for x in rec.losses) and rec.losses[-1] < 0.6 * rec.losses[0]
    muon, adamw = trainer.optimizers
    assert isinstance(muon, torch.optim.Muon) and isinstance(adamw, torch.optim.AdamW)
    muon_ids = {id(p) for g in muon.param_groups for p in g["params"]}
    adamw_ids = {id(p) for g in adamw.param_groups for p in g["params"]}
    block_matrices = {id(p) for p in module.model.transformer.h.parameters() if p.ndim == 2}
    assert muon_ids == block_matrices and not muon_ids & adamw_ids
    assert muon_ids | adamw_ids == {id(p) for p in module.model.parameters()}
    for p in (module.model.transformer.wte.weight, module.model.lm_head.weight, module.model.transformer.ln_f.weight):
        assert id(p) in adamw_ids
    assert adamw.param_groups[0]["weight_decay"] == 0.1 and adamw.param_groups[0]["betas"] == (0.9, 0.95)
    assert [c.scheduler.last_epoch for c in trainer.lr_scheduler_configs] == [20, 20]
    assert all(p.grad is None for p in module.model.parameters())


def test_muon_gradient_accumulation_and_clipping():
    module = LitGPTPretrainModule(SMALL, MUON, max_steps=3, lr_warmup_steps=0, accumulate_grad_batches=2,
                                  max_norm=1e-3, muon_adamw={"lr": 1e-3})
    norms = []

    class Spy(L.Callback):
        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            grads = [p.grad for p in pl_module.model.parameters() if p.grad is not None]
            norms.append(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item())

    trainer = _trainer(3, callbacks=[Spy()])
    trainer.fit(module, _loader(6))
    assert trainer.global_step == 3 and trainer.fit_loop.epoch_loop.batch_progress.total.ready == 6
    assert norms and max(norms) <= 1e-3 * (1 + 1e-4)  # one global norm over both optimizers


class _StepsLogger(L.pytorch.loggers.Logger):
    """Records the step every metric is written at."""

    def __init__(self):
        super().__init__()
        self.steps: dict[str, list[int]] = {}

    @property
    def name(self):
        return "steps"

    @property
    def version(self):
        return 0

    def log_hyperparams(self, params, *args, **kwargs):
        pass

    def log_metrics(self, metrics, step=None):
        for key in metrics:
            self.steps.setdefault(key, []).append(step)


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_train_loss_is_logged_once_per_optimizer_step_with_accumulation(optimizer):
    """Lightning counts batches as logging steps under manual optimization (Muon); the module makes them optimizer
    steps, so Muon and AdamW curves (and the growth callback's tags, logged at ``global_step``) share one x axis."""
    from lightning_sparkling import GrowthStage, WidthGrowthCallback

    if optimizer == "muon":
        module = LitGPTPretrainModule(SMALL, MUON, max_steps=4, lr_warmup_steps=0, accumulate_grad_batches=2,
                                      muon_adamw={"lr": 1e-3})
        trainer_accumulate = 1
    else:
        module = LitGPTPretrainModule(SMALL, ADAMW, max_steps=4, lr_warmup_steps=0)
        trainer_accumulate = 2
    logger = _StepsLogger()
    growth = WidthGrowthCallback(GrowthStage(2, intermediate_size=128, rewarmup_steps=1), min_lr=0.0)
    trainer = _trainer(4, logger=logger, log_every_n_steps=1, accumulate_grad_batches=trainer_accumulate,
                       callbacks=[growth])
    trainer.fit(module, _loader(8))
    assert trainer.global_step == 4
    assert logger.steps["train_loss"] == [0, 1, 2, 3]
    assert logger.steps["growth/event"] == [2]
    assert logger.steps["growth/lr_new/stage_0"] == [2, 3, 4]
    assert trainer.fit_loop.epoch_loop._batches_that_stepped == 4  # what Lightning checkpoints for resume


def test_adamw_clips_to_max_norm_without_a_trainer_setting():
    module = LitGPTPretrainModule(SMALL, ADAMW, max_steps=2, lr_warmup_steps=0, max_norm=1e-3)
    norms = []
    original = module.configure_gradient_clipping

    def spy(optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        original(optimizer, gradient_clip_val, gradient_clip_algorithm)
        grads = [p.grad for p in module.model.parameters()]
        norms.append(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item())

    module.configure_gradient_clipping = spy
    _trainer(2).fit(module, _loader(2))
    assert len(norms) == 2 and max(norms) <= 1e-3 * (1 + 1e-4)
    # a Trainer setting takes precedence
    module = LitGPTPretrainModule(SMALL, ADAMW, max_steps=1, lr_warmup_steps=0, max_norm=None)
    assert module.gradient_clip_val is None
    _trainer(1, gradient_clip_val=0.5).fit(module, _loader(1))


def test_lr_follows_warmup_cosine_lambda():
    module = LitGPTPretrainModule(SMALL, ADAMW, max_steps=12, lr_warmup_steps=4, min_lr=3e-4)
    rec = _Losses()
    trainer = _trainer(12, callbacks=[rec])
    trainer.fit(module, _loader(12))
    sched = trainer.lr_scheduler_configs[0]
    assert sched.interval == "step" and isinstance(sched.scheduler, torch.optim.lr_scheduler.LambdaLR)
    lam = sched.scheduler.lr_lambdas[0]
    assert isinstance(lam, WarmupCosineLambda)
    assert (lam.warmup_steps, lam.total_steps) == (4, 12) and lam.min_lr_ratio == pytest.approx(0.1)
    expected = [3e-3 * lam(step) for step in range(12)]
    assert [lrs[0] for lrs in rec.lrs] == pytest.approx(expected, rel=1e-6, abs=1e-12)
    assert rec.lrs[0][0] == 0.0 and rec.lrs[4][0] == pytest.approx(3e-3)
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(3e-4)  # min_lr at max_steps


def test_schedule_defaults_follow_the_paper():
    module = LitGPTPretrainModule(SMALL, ADAMW, max_steps=200)
    assert module.schedule_steps() == (6, 200)  # 3% warmup
    config = module.configure_optimizers()
    assert config["lr_scheduler"]["scheduler"].lr_lambdas[0].min_lr_ratio == 0.01
    assert LitGPTPretrainModule(SMALL, ADAMW, max_steps=200, lr_warmup_fraction=0.1).schedule_steps() == (20, 200)
    muon = LitGPTPretrainModule(SMALL, MUON, max_steps=100, min_lr=2e-3)
    configs = muon.configure_optimizers()
    assert [c["lr_scheduler"]["scheduler"].lr_lambdas[0].min_lr_ratio for c in configs] == pytest.approx([0.1, 0.1])
    # max_steps from the Trainer when the module has none
    module = LitGPTPretrainModule(SMALL, ADAMW, lr_warmup_steps=1)
    trainer = _trainer(3)
    trainer.fit(module, _loader(3))
    assert trainer.lr_scheduler_configs[0].scheduler.lr_lambdas[0].total_steps == 3


def test_validation_logs_loss_and_perplexity():
    module = LitGPTPretrainModule(SMALL, ADAMW, max_steps=2, lr_warmup_steps=1)
    trainer = _trainer(2, limit_val_batches=None, num_sanity_val_steps=0)
    trainer.fit(module, _loader(2), _loader(3, seed=1))
    metrics = trainer.callback_metrics
    assert {"train_loss", "val_loss", "val_ppl"} <= set(metrics)
    assert float(metrics["val_ppl"]) == pytest.approx(math.exp(float(metrics["val_loss"])), rel=1e-5)
    # val_loss is the token-weighted mean cross-entropy
    module.eval()
    with torch.no_grad():
        batches = list(_loader(3, seed=1))
        losses = [module._lm_loss(b) for b in batches]
    assert float(metrics["val_loss"]) == pytest.approx(float(torch.stack(losses).mean()), rel=1e-5)


def test_flops_per_batch_follows_the_model():
    module = LitGPTPretrainModule(SMALL, ADAMW, max_steps=1, lr_warmup_steps=0)
    n = sum(p.numel() for p in module.model.parameters())
    assert active_parameter_count(module.model) == n
    # litgpt's count (measure_flops on a meta model, forward + backward) of the model and batch shape at hand
    assert module.update_flops_per_batch(4, 16) == litgpt_measured_flops(Config(**SMALL), 4) == module.flops_per_batch
    trainer = _trainer(1)
    trainer.fit(module, _loader(1, batch_size=2))
    assert module.flops_per_batch == litgpt_measured_flops(Config(**SMALL), 2)
    module.model = build_gpt(BIG)  # as a growth callback would
    _trainer(1).fit(module, _loader(1))
    assert module.flops_per_batch == litgpt_measured_flops(Config(**BIG), 4)
    tied = LitGPTPretrainModule(SMALL, max_steps=1, tie_embeddings=True)
    assert active_parameter_count(tied.model) == n - VOCAB * 32
    moe = build_gpt({**SMALL, "mlp_class_name": "LLaMAMoE", "n_expert": 4, "n_expert_per_token": 1,
                     "moe_intermediate_size": 16})
    per_expert = 3 * 32 * 16
    assert active_parameter_count(moe) == sum(p.numel() for p in moe.parameters()) - 2 * 3 * per_expert


# ------------------------------------------------------------------ checkpoints
def _grown_checkpoint(tmp_path, optimizer=ADAMW, **kwargs):
    """Train a module whose model was swapped for a bigger one (as growth does), save a checkpoint."""
    module = LitGPTPretrainModule(SMALL, optimizer, max_steps=6, lr_warmup_steps=1, **kwargs)
    module.model = build_gpt(BIG, seed=7)
    trainer = _trainer(3)
    trainer.fit(module, _loader(6))
    path = tmp_path / "grown.ckpt"
    trainer.save_checkpoint(path)
    return module, path


def test_checkpoint_of_a_grown_model_loads_into_a_small_module(tmp_path):
    grown, path = _grown_checkpoint(tmp_path)
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    assert ckpt["model_config"] == asdict(Config(**BIG))
    assert ckpt["hyper_parameters"]["model_config"] == asdict(Config(**SMALL))
    assert ckpt["state_dict"]["model.lm_head.weight"].shape == (VOCAB, 64)

    loaded = LitGPTPretrainModule.load_from_checkpoint(path)
    assert loaded.model.config == Config(**BIG)
    assert all(torch.equal(a, b) for a, b in zip(loaded.model.state_dict().values(), grown.model.state_dict().values()))

    # manual hook call: rebuilt before the weights load, nothing when the config matches
    fresh = LitGPTPretrainModule(SMALL, ADAMW, max_steps=6)
    fresh.on_load_checkpoint(ckpt)
    assert fresh.model.config == Config(**BIG)
    same = fresh.model
    fresh.on_load_checkpoint(ckpt)
    assert fresh.model is same


def test_trainer_resumes_a_grown_checkpoint_into_a_small_module(tmp_path):
    grown, path = _grown_checkpoint(tmp_path)
    fresh = LitGPTPretrainModule(SMALL, ADAMW, max_steps=6, lr_warmup_steps=1)
    assert fresh.model.config == Config(**SMALL)
    rec = _Losses()
    trainer = _trainer(6, callbacks=[rec])
    trainer.fit(fresh, _loader(6), ckpt_path=path)
    assert trainer.global_step == 6 and len(rec.losses) == 3 and all(math.isfinite(x) for x in rec.losses)
    assert fresh.model.config == Config(**BIG)
    opt_params = {id(p) for g in trainer.optimizers[0].param_groups for p in g["params"]}
    assert opt_params == {id(p) for p in fresh.model.parameters()}
    # the module that saved the checkpoint, resumed the same way, ends at the same weights
    grown_trainer = _trainer(6)
    grown_trainer.fit(grown, _loader(6), ckpt_path=path)
    assert all(torch.allclose(a, b) for a, b in zip(fresh.model.parameters(), grown.model.parameters()))


def test_muon_checkpoint_resume(tmp_path):
    _, path = _grown_checkpoint(tmp_path, MUON, muon_adamw={"lr": 1e-3})
    fresh = LitGPTPretrainModule(SMALL, MUON, max_steps=6, lr_warmup_steps=1, muon_adamw={"lr": 1e-3})
    trainer = _trainer(6)
    trainer.fit(fresh, _loader(6), ckpt_path=path)
    assert trainer.global_step == 6 and fresh.model.config == Config(**BIG)
    assert [c.scheduler.last_epoch for c in trainer.lr_scheduler_configs] == [6, 6]


# ------------------------------------------------------------------ FSDP2
def test_shard_gpt_shards_blocks_then_root_once():
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule

    if dist.is_initialized():
        pytest.skip("a process group is already initialized")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        model = build_gpt(SMALL, seed=0)
        x = torch.randint(0, VOCAB, (2, 8))
        expected = model(x)
        assert shard_gpt(model, mesh) is model
        assert isinstance(model, FSDPModule) and all(isinstance(b, FSDPModule) for b in model.transformer.h)
        shard_gpt(model, mesh)  # already sharded: nothing happens
        torch.testing.assert_close(model(x), expected)
    finally:
        dist.destroy_process_group()
