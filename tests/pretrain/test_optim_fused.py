"""The optimizers a run builds are fused where the kernel can run them (``optim.fused_kwargs``), and a spec that
chooses its own implementation keeps it."""

from __future__ import annotations

import pytest
import torch

from lightning_sparkling.pretrain.training.module import LitGPTPretrainModule, _next_token_loss

CONFIG = dict(n_embd=32, n_head=4, n_layer=2, block_size=16, vocab_size=64, padded_vocab_size=64,
              mlp_class_name="LLaMAMLP", intermediate_size=64, norm_class_name="RMSNorm", bias=False)


def _optimizers(spec, **kwargs) -> list[torch.optim.Optimizer]:
    module = LitGPTPretrainModule(CONFIG, spec, max_steps=4, lr_warmup_steps=1, **kwargs)
    configs = module.configure_optimizers()
    return [c["optimizer"] for c in (configs if isinstance(configs, list) else [configs])]


@pytest.mark.parametrize("spec", ["AdamW", "Adam", {"class_path": "torch.optim.AdamW", "init_args": {"lr": 1e-3}}])
def test_adam_and_adamw_are_fused_on_cpu(spec):
    (opt,) = _optimizers(spec)
    assert [g["fused"] for g in opt.param_groups] == [True]
    assert opt.param_groups[0]["foreach"] in (None, False)


@pytest.mark.parametrize("impl", [{"foreach": True}, {"fused": False}])
def test_a_spec_that_chooses_its_implementation_keeps_it(impl):
    (opt,) = _optimizers({"class_path": "torch.optim.AdamW", "init_args": {"lr": 1e-3, **impl}})
    assert not opt.param_groups[0]["fused"]
    assert opt.param_groups[0]["foreach"] == impl.get("foreach")


def test_sgd_is_left_alone_and_muons_adamw_part_is_fused():
    (sgd,) = _optimizers({"class_path": "torch.optim.SGD", "init_args": {"lr": 1e-2}})
    assert not sgd.param_groups[0].get("fused")
    muon, adamw = _optimizers({"class_path": "torch.optim.Muon", "init_args": {"lr": 1e-2}})
    assert "fused" not in muon.defaults
    assert type(adamw) is torch.optim.AdamW and adamw.param_groups[0]["fused"] is True


def test_fused_adamw_trains_the_module():
    """One fused AdamW step moves every parameter, and to where a foreach step moves it."""
    torch.manual_seed(0)
    batch = torch.randint(0, 64, (2, 17))
    after = {}
    for name, spec in (("fused", "AdamW"), ("foreach", {"class_path": "torch.optim.AdamW",
                                                         "init_args": {"foreach": True}})):
        module = LitGPTPretrainModule(CONFIG, spec, max_steps=4, lr_warmup_steps=0)
        before = {n: p.detach().clone() for n, p in module.model.named_parameters()}
        opt = module.configure_optimizers()["optimizer"]
        _next_token_loss(module.model, batch).backward()
        opt.step()
        after[name] = {n: p.detach().clone() for n, p in module.model.named_parameters()}
        assert all(not torch.equal(before[n], p) for n, p in after[name].items()), name
    for n, p in after["fused"].items():
        torch.testing.assert_close(p, after["foreach"][n], rtol=1e-5, atol=1e-6)
