"""Run by tests/distributed/test_fsdp1.py on 2 CPU ranks (gloo): FSDP1 growth checked piece by piece, without Lightning,
and ``LitGPTPretrainModule`` grown inside a Lightning fit under (a CPU subclass of) ``FSDPStrategy``.

    python tests/fsdp1_script.py OUT_DIR {surgery|rollback|module|module-bf16}

- ``surgery``: after two training steps, ``grow_fsdp1`` + ``plan_fsdp1_optimizer_patch`` must give, on every rank,
  exactly the shards of what the plain ``grow_model`` + ``plan_optimizer_patch`` give on the gathered model and
  optimizer state; every new entry of every grown parameter must be covered exactly once by the ranks'
  ``flat_pieces``.
- ``rollback``: an optimizer patch that fails half-way leaves the wrapped model, its parameters and the optimizer
  as they were, and training goes on.
- ``module``: ``LitGPTPretrainModule`` (``configure_model`` -> ``wrap_gpt``, clipping through the root unit,
  FLOPs from the config, activation checkpointing of the blocks) grows at step 3 of 6 and trains on, with symmetry
  diagnostics (gathered unit by unit) and the ActivationRMSMonitor every step; ``module-bf16`` the same under
  ``bf16-mixed`` (FSDP1 ``MixedPrecision``: growth gathers and writes the fp32 shards).

Each rank writes OUT_DIR/<mode>-rank<r>.json with what it measured; the test asserts on it.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import enable_wrap

sys.path.insert(0, str(Path(__file__).parent))
from _tiny import exit_now, paper_stage, tiny_config, token_batch

from lightning_sparkling.parallel.fsdp1 import (
    flat_pieces,
    grow_fsdp1,
    named_params,
    plan_fsdp1_optimizer_patch,
    shard_range,
)
from lightning_sparkling.parallel import wrap_gpt
from lightning_sparkling.parallel.testing import CPUFSDPStrategy
from lightning_sparkling.growth.optim_state import plan_optimizer_patch
from lightning_sparkling.growth.surgery import grow_model

STAGE = paper_stage(2, n_embd=64, intermediate_size=128)


class Strategy:
    """What grow_fsdp1 needs of Lightning's FSDPStrategy: the wrapping context configure_model runs in."""

    @contextmanager
    def model_sharded_context(self):
        with enable_wrap(wrapper_cls=FSDP, use_orig_params=True, device_id=torch.device("cpu")):
            yield


class Holder(torch.nn.Module):
    """A LightningModule stand-in: holds the GPT at ``self.model``; ``configure_model`` wraps it."""

    def __init__(self) -> None:
        super().__init__()
        from litgpt import GPT

        torch.manual_seed(0)
        self.model = GPT(tiny_config())
        self.model.apply(self.model._init_weights)

    def configure_model(self) -> None:
        self.model = wrap_gpt(self.model)


def _train(holder: Holder, opt: torch.optim.Optimizer, steps: range) -> None:
    rank = dist.get_rank()
    for step in steps:
        ids = token_batch(step, 0, rank=rank)
        logits = holder.model(ids[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).backward()
        opt.step()
        opt.zero_grad()


def _wrapped(strategy: Strategy) -> tuple[Holder, torch.optim.Optimizer]:
    holder = Holder()
    with strategy.model_sharded_context():
        holder.configure_model()
    opt = torch.optim.AdamW(holder.parameters(), lr=1e-2, weight_decay=0.1)
    _train(holder, opt, range(2))
    return holder, opt


def _full_copy(holder: Holder, opt: torch.optim.Optimizer):
    """A plain GPT and AdamW holding the gathered weights and optimizer state of the wrapped model, and how far the
    weights rebuilt from the ranks' shard views (placed by ``shard_range``) are from FSDP's own full state dict.

    The optimizer state is rebuilt from the shards too: on CPU, ``FSDP.optim_state_dict`` (full, every rank) returns
    a wrong ``exp_avg`` in torch 2.13 (``exp_avg_sq`` is right), so it cannot serve as the reference here."""
    from litgpt import GPT

    weights = {k: v.detach().clone() for k, v in holder.model.state_dict().items()}  # full, every rank
    params = named_params(holder.model)
    local = {n: (shard_range(p, holder.model), p.detach().clone(),
                 {k: v.clone() for k, v in opt.state.get(p, {}).items() if v.ndim > 0}) for n, p in params.items()}
    ranks: list = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, local)
    plain = GPT(tiny_config())
    plain.load_state_dict(weights)
    plain_opt = torch.optim.AdamW(plain.parameters(), lr=1e-2, weight_decay=0.1)
    named = dict(plain.named_parameters())
    placement_diff = 0.0
    for n, p in named.items():
        rebuilt = torch.zeros(p.numel())
        state = {k: torch.zeros(p.numel()) for k in ("exp_avg", "exp_avg_sq")}
        for held, shard, shard_state in (r[n] for r in ranks):
            if held is not None:
                (start, stop), _ = held
                rebuilt[start:stop] = shard
                for k in state:
                    state[k][start:stop] = shard_state[k]
        placement_diff = max(placement_diff, float((rebuilt.view_as(p) - p.detach()).abs().max()))
        step = next(s for s in opt.state.values() if s)["step"].clone()
        plain_opt.state[p] = {"step": step, **{k: v.view_as(p) for k, v in state.items()}}
    return plain, plain_opt, placement_diff


def surgery(out: dict) -> None:
    strategy = Strategy()
    holder, opt = _wrapped(strategy)
    plain, plain_opt, placement_diff = _full_copy(holder, opt)
    result = grow_fsdp1(holder, strategy, holder.model.module, STAGE, seed=3, stage_index=0)
    plan_fsdp1_optimizer_patch(opt, result, "asymmetric").apply()
    plain_result = grow_model(plain, STAGE, seed=3, stage_index=0)
    plan_optimizer_patch(plain_opt, plain_result, "asymmetric").apply()

    plain_params = dict(plain.named_parameters())
    weight_diff = state_diff = 0.0
    covered: dict[str, list[float]] = {}
    new_entries: dict[str, list[float]] = {}
    for name, p in named_params(holder.model).items():
        held = shard_range(p, holder.model)
        full, full_state = plain_params[name].detach(), plain_opt.state[plain_params[name]]
        if held is not None:
            (start, stop), shape = held
            assert tuple(shape) == tuple(full.shape), (name, shape, full.shape)
            weight_diff = max(weight_diff, float((p.detach() - full.flatten()[start:stop]).abs().max()))
            for key in ("exp_avg", "exp_avg_sq"):
                state_diff = max(state_diff, float((opt.state[p][key] - full_state[key].flatten()[start:stop])
                                                   .abs().max()))
            # every new entry this rank holds, seen through its flat pieces
            expected = torch.zeros(full.shape)
            for piece in plain_result.new_entries.get(name, []):
                expected[piece] += 1.0
            new_entries[name] = expected.flatten().tolist()
            marker = torch.zeros(full.numel())
            for piece in plain_result.new_entries.get(name, []):
                for fp in flat_pieces(tuple(shape), piece, start, stop):
                    fp(marker[start:stop]).add_(1.0)
            covered[name] = marker.tolist()
    out.update(placement_diff=placement_diff, weight_diff=weight_diff, state_diff=state_diff,
               config=holder.model.config.n_embd, covered=covered, new_entries=new_entries,
               steps_after=_steps_after(holder, opt))


def _steps_after(holder: Holder, opt: torch.optim.Optimizer) -> list[float]:
    rank = dist.get_rank()
    losses = []
    for step in range(2, 4):
        ids = token_batch(step, 0, rank=rank)
        loss = F.cross_entropy(holder.model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def rollback(out: dict) -> None:
    import lightning_sparkling.parallel.fsdp1 as fsdp1

    strategy = Strategy()
    holder, opt = _wrapped(strategy)
    wrapper = holder.model
    before = {n: (p, p.detach().clone()) for n, p in named_params(wrapper).items()}
    state_before = {id(p): {k: v.clone() for k, v in s.items()} for p, s in opt.state.items()}
    groups_before = [list(g["params"]) for g in opt.param_groups]
    result = grow_fsdp1(holder, strategy, wrapper.module, STAGE, seed=3, stage_index=0)
    calls = {"n": 0}
    original = fsdp1.scatter_values

    def failing(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("injected failure")
        return original(*args, **kwargs)

    fsdp1.scatter_values = failing
    try:
        plan_fsdp1_optimizer_patch(opt, result, "asymmetric")
        raised = False
    except RuntimeError:
        raised = True
        result.rollback()
    fsdp1.scatter_values = original
    same_objects = holder.model is wrapper and all(named_params(wrapper)[n] is p for n, (p, _) in before.items())
    same_values = all(torch.equal(p.detach(), v) for p, v in before.values())
    same_optimizer = [list(g["params"]) for g in opt.param_groups] == groups_before and all(
        torch.equal(v, state_before[id(p)][k]) for p, s in opt.state.items() for k, v in s.items())
    out.update(raised=raised, same_objects=same_objects, same_values=same_values, same_optimizer=same_optimizer,
               width=holder.model.config.n_embd, steps_after=_steps_after(holder, opt))


def module(out: dict, out_dir: Path, precision: str = "32-true") -> None:
    import lightning as L

    from lightning.pytorch.loggers import CSVLogger
    from litgpt.model import Block
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    from lightning_sparkling import ActivationRMSMonitor, WidthGrowthCallback
    from lightning_sparkling.pretrain.training.module import LitGPTPretrainModule

    cfg = dict(n_embd=32, n_head=4, n_query_groups=2, n_layer=2, block_size=16, vocab_size=64, padded_vocab_size=64,
               mlp_class_name="LLaMAMLP", intermediate_size=64, norm_class_name="RMSNorm", bias=False)
    lit = LitGPTPretrainModule(cfg, {"class_path": "torch.optim.AdamW", "init_args": {"lr": 1e-2}}, max_steps=6,
                               lr_warmup_steps=1, max_norm=0.5)
    growth = WidthGrowthCallback(paper_stage(3, n_embd=64, intermediate_size=128, rewarmup_steps=2),
                                 symmetry_every_n_steps=1)
    monitor = ActivationRMSMonitor(every_n_steps=1)
    g = torch.Generator().manual_seed(int(os.environ.get("LOCAL_RANK", 0)))  # each rank its own data
    data = torch.utils.data.DataLoader(torch.randint(0, 64, (48, 17), generator=g), batch_size=4)
    strategy = CPUFSDPStrategy(use_orig_params=True, activation_checkpointing_policy={Block})
    trainer = L.Trainer(max_steps=6, accelerator="cpu", devices=2, strategy=strategy, precision=precision,
                        callbacks=[growth, monitor], logger=CSVLogger(str(out_dir), name="logs"),
                        log_every_n_steps=1, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=str(out_dir))
    trainer.fit(lit, data)
    from _litgpt_flops import litgpt_measured_flops

    out.update(wrapped=type(lit.model).__name__, n_embd=lit.model.config.n_embd, step=trainer.global_step,
               flops_per_batch=lit.flops_per_batch,
               expected_flops=litgpt_measured_flops(lit.model.config, 4),  # block_size 16: the batches' length
               loss_after=growth.summaries[0]["loss_after"], symmetry=growth.last_symmetry,
               rms_step=monitor.last_step, rms=monitor.last_values,
               checkpointed_blocks=sum(isinstance(m, CheckpointWrapper) for m in lit.model.modules()),
               param_dtypes=sorted({str(p.dtype) for p in lit.model.parameters()}))


if __name__ == "__main__":
    out_dir, mode = Path(sys.argv[1]), sys.argv[2]
    out: dict = {}
    if mode in ("module", "module-bf16"):  # Lightning launches rank 1 itself
        module(out, out_dir, "bf16-mixed" if mode == "module-bf16" else "32-true")
        rank = dist.get_rank()
    else:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dist.init_process_group("gloo", rank=rank, world_size=world)
        {"surgery": surgery, "rollback": rollback}[mode](out)
    (out_dir / f"{mode}-rank{rank}.json").write_text(json.dumps(out))
    dist.barrier()  # both ranks' results are on disk
    dist.destroy_process_group()
    exit_now()
