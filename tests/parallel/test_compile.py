"""``compile`` (``LitGPTPretrainModule(compile=...)``, :func:`compile_gpt`) with growth and the RMS monitor.

The default run has ONE small inductor case (:func:`test_inductor_growth_rms_and_logits`, about a minute of compiling
on an idle CPU core); the cheap mechanics use a counting backend (no code generated). Tests marked ``compile`` compile
more (inductor or ``aot_eager``, several processes) and run only when asked::

    SPARKLING_COMPILE_TESTS=1 python -m pytest -q -p no:xdist -m compile tests/
"""

from __future__ import annotations

import logging
import os

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from torch._dynamo.eval_frame import _debug_get_cache_entry_list

from _tiny import TinyModule, assert_states_equal, make_trainer, tiny_config
from lightning_sparkling import ActivationRMSMonitor, GrowthCallback, GrowthStage
from lightning_sparkling.parallel import compile_gpt
from lightning_sparkling.parallel.compile import (compiled_codes, compiled_scope, eager, is_compiled,
                                                  recompile_after_growth)
from lightning_sparkling.pretrain.training.module import LitGPTPretrainModule

ADAMW = {"class_path": "torch.optim.AdamW", "init_args": {"lr": 3e-3, "weight_decay": 0.1, "betas": [0.9, 0.95]}}
RUN_COMPILE = pytest.mark.skipif(not os.environ.get("SPARKLING_COMPILE_TESTS"),
                                 reason="compiles a lot: set SPARKLING_COMPILE_TESTS=1 (and -m compile)")


@pytest.fixture(autouse=True)
def _fresh_compiler():
    torch.compiler.reset()
    yield
    torch.compiler.reset()


class Counting:
    """A ``torch.compile`` backend that runs the captured graph as is and records the shapes it was compiled for."""

    def __init__(self) -> None:
        self.shapes: list[list[tuple[int, ...]]] = []

    def __call__(self, gm, example_inputs):
        self.shapes.append([tuple(t.shape) for t in example_inputs if isinstance(t, torch.Tensor)])
        return gm.forward


class Losses(L.Callback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


def fit(compile, stages=(), max_steps=4, accumulate=1, monitor=None, tmp_path=None, scope="whole", extra=(),
        checkpointing=False, **trainer_kwargs):
    torch.manual_seed(0)
    data = torch.utils.data.DataLoader(torch.randint(0, 64, (4 * max_steps * accumulate, 17)), batch_size=4)
    module = LitGPTPretrainModule(tiny_config(), ADAMW, max_steps=max_steps, lr_warmup_steps=1, compile=compile,
                                  compile_scope=scope, activation_checkpointing=checkpointing)
    losses = Losses()
    growth = GrowthCallback(list(stages)) if stages else None
    callbacks = [losses] + ([growth] if growth else []) + ([monitor] if monitor else []) + list(extra)
    trainer = L.Trainer(max_steps=max_steps, accelerator="cpu", enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accumulate_grad_batches=accumulate, callbacks=callbacks,
                        logger=CSVLogger(str(tmp_path)) if tmp_path else False, log_every_n_steps=1,
                        **trainer_kwargs)
    trainer.fit(module, data)
    return module, losses.losses, growth


def cache_entries(scope: str = "whole") -> int:
    """Compiled graphs cached for the frame the model's compiled code runs: ``GPT.forward`` for ``model.compile()``
    (``nn.Module`` internals are skipped by dynamo), ``Block.forward`` per block."""
    from litgpt.model import GPT, Block

    return len(_debug_get_cache_entry_list(GPT.forward if scope == "whole" else Block.forward))


STAGES = [GrowthStage(2, n_embd=64, intermediate_size=128, n_layer=3, rewarmup_ratio=None)]


@pytest.mark.parametrize("scope, accumulate", [("whole", 1), ("whole", 2), ("blocks", 1)])
def test_growth_drops_the_old_graph_and_compiles_the_grown_shapes(scope, accumulate):
    backend = Counting()
    module, losses, growth = fit({"backend": backend}, STAGES, accumulate=accumulate, scope=scope)
    _, eager_losses, _ = fit(False, STAGES, accumulate=accumulate)
    assert module.model.config.n_embd == 64 and len(module.model.transformer.h) == 3
    assert list(module.model.state_dict()) == list(LitGPTPretrainModule(module.model.config).model.state_dict())
    # one graph for the small model, one for the grown one (the growth's loss check ran eagerly: no graph of its own);
    # per block: one graph that every block runs, before and after
    assert len(backend.shapes) == 2
    small, grown = (set(shapes) for shapes in backend.shapes)
    assert (32, 64) in small and (64, 128) not in small  # mlp.proj: (n_embd, intermediate_size)
    assert (64, 128) in grown and (32, 64) not in grown
    assert cache_entries(scope) == 1  # the small model's graph was dropped, not kept next to the grown one
    assert losses == pytest.approx(eager_losses, rel=1e-5)  # the captured graph runs the same ops
    summary = growth.summaries[0]
    assert summary["compiled"] is True and summary["first_step_seconds"] > 0


class CallsUserFunction(L.Callback):
    """Calls a function the user compiled elsewhere at every step (before and after the growths)."""

    def __init__(self, function) -> None:
        self.function, self.calls = function, 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        torch.testing.assert_close(self.function(torch.ones(3)), torch.full((3,), 2 * torch.sin(torch.ones(1)).item()))
        self.calls += 1


GROWTHS = [GrowthStage(2, n_embd=64, intermediate_size=128, rewarmup_ratio=None),
           GrowthStage(4, n_layer=3, rewarmup_ratio=None)]


@pytest.mark.parametrize("scope, checkpointing, graphs", [("whole", False, 3), ("blocks", False, 2),
                                                          ("blocks", True, 2)])
def test_a_growth_recompiles_only_the_model(scope, checkpointing, graphs):
    """A width growth, then a depth growth. Only the model's graphs are dropped: a function the user compiled
    elsewhere compiles once and runs its graph before and after both growths. Whole, the model compiles three graphs
    (small, wide, deep); per block two (the small block, the wide block): the depth growth's new block runs the wide
    block's graph."""
    user_backend, backend = Counting(), Counting()
    user = CallsUserFunction(torch.compile(lambda x: 2 * torch.sin(x), backend=user_backend))
    module, _, growth = fit({"backend": backend}, GROWTHS, max_steps=6, scope=scope, extra=[user],
                            checkpointing=checkpointing)
    assert len(module.model.transformer.h) == 3 and module.model.config.n_embd == 64
    assert user.calls == 6 and len(user_backend.shapes) == 1  # compiled at step 0, never again
    assert len(backend.shapes) == graphs
    assert [s["compiled"] for s in growth.summaries] == [True, True]
    code = next(iter(compiled_codes(module.model)))  # GPT.forward, Block.forward or the checkpointed forward
    assert len(compiled_codes(module.model)) == 1 and len(_debug_get_cache_entry_list(code)) == 1


class ReadmeUser(TinyModule):
    """A Trainer user as README shows one: ``self.model.compile()`` in ``configure_model`` (the whole GPT)."""

    def __init__(self, backend) -> None:
        super().__init__(max_steps=6)
        self.backend = backend

    def configure_model(self) -> None:
        if getattr(self.model, "_compiled_call_impl", None) is None:
            self.model.compile(backend=self.backend)


def test_a_trainer_users_whole_compiled_gpt_recompiles_alone_and_the_log_says_so():
    """README's ``self.model.compile()``: after a width growth the GPT recompiles (the grown shapes), the user's other
    compiled function does not, and the growth log says that the whole GPT recompiles and what per block does."""
    backend, user_backend = Counting(), Counting()
    module = ReadmeUser(backend)
    user = CallsUserFunction(torch.compile(lambda x: 2 * torch.sin(x), backend=user_backend))
    growth = GrowthCallback(GrowthStage(2, n_embd=64, intermediate_size=128, rewarmup_steps=1))
    lines: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")  # rank_zero_info's (it may not propagate)
    logger.addHandler(handler)
    try:
        make_trainer([growth, user], max_steps=4).fit(module)
    finally:
        logger.removeHandler(handler)
    log = "\n".join(lines)
    assert module.model.config.n_embd == 64 and module.model._compiled_call_impl is not None
    assert len(backend.shapes) == 2 and (64, 128) in set(backend.shapes[1])  # small, then grown
    assert user.calls == 4 and len(user_backend.shapes) == 1
    assert growth.summaries[0]["compile_scope"] == "whole"
    assert "stage 0: the model is compiled whole, so the next step recompiles all of it" in log
    assert "compile_gpt(model, per_block=True)) a width growth recompiles one block's graph" in log
    assert "(recompiling the whole GPT included" in log


def test_compile_gpt_whole_or_per_block_and_trainer_users():
    from litgpt import GPT

    model = GPT(tiny_config())
    assert not is_compiled(model) and not recompile_after_growth(model, model)
    compile_gpt(model, backend="eager")
    impl = model._compiled_call_impl
    compile_gpt(model, backend="eager")  # again: kept
    assert model._compiled_call_impl is impl and is_compiled(model) and compiled_scope(model) == "whole"
    blocks = GPT(tiny_config())
    compile_gpt(blocks, per_block=True, backend="eager")
    assert blocks._compiled_call_impl is None and is_compiled(blocks) and compiled_scope(blocks) == "blocks"
    assert compiled_scope(GPT(tiny_config())) is None
    # a depth growth's new block is compiled like the others
    from lightning_sparkling import grow_model

    grow_model(blocks, GrowthStage(0, n_layer=3, rewarmup_ratio=None))
    assert recompile_after_growth(blocks, blocks)
    assert all(hasattr(b.__dict__.get("forward"), "_sparkling_compile_options") for b in blocks.transformer.h)
    # a user's torch.compile(model) wrapper counts as compiled too
    assert is_compiled(torch.nn.Sequential(torch.compile(GPT(tiny_config()), backend="eager")))


def test_the_module_compiles_whole_by_default_and_per_block_when_asked():
    from types import SimpleNamespace

    from lightning.pytorch.strategies import SingleDeviceStrategy

    def prepared(**kwargs):
        module = LitGPTPretrainModule(tiny_config(), compile={"backend": "eager"}, **kwargs)
        module._trainer = SimpleNamespace(strategy=SingleDeviceStrategy("cpu"))  # what configure_model reads
        module.configure_model()
        return module.model

    assert compiled_scope(prepared()) == "whole" and compiled_scope(prepared(compile_scope="blocks")) == "blocks"
    with pytest.raises(ValueError, match="compile_scope='parts' must be one of whole, blocks"):
        LitGPTPretrainModule(tiny_config(), compile=True, compile_scope="parts")


class RecordingMonitor(ActivationRMSMonitor):
    """Keeps every logged ``{tag: value}`` (the monitor keeps the last one only)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.history: list[dict[str, float]] = []

    def _reduce(self, tags, values, device):
        self.history.append(super()._reduce(tags, values, device))
        return self.history[-1]


def assert_same_rms(compiled: RecordingMonitor, plain: RecordingMonitor, rel: float) -> None:
    """Logging steps 0, 2 and 4 (the growth is after step 1): the same tags, the new block's after the growth,
    values within ``rel``."""
    assert [sorted(v) for v in compiled.history] == [sorted(v) for v in plain.history]
    assert len(compiled.history) == 3 and compiled.last_step == 4
    assert "rms/residual/block_02" not in compiled.history[0]
    assert "rms/residual/block_02" in compiled.history[1] and "rms/mlp_ratio/block_02" in compiled.history[2]
    for got, want in zip(compiled.history, plain.history):
        assert got == pytest.approx(want, rel=rel)


def test_rms_monitor_on_a_compiled_model_logs_the_eager_values(tmp_path):
    """Counting backend: the logging steps run eagerly (the hooks fire), the others compiled; values and tags are
    the eager model's, before and after a growth."""
    backend = Counting()
    monitor, eager_monitor = RecordingMonitor(every_n_steps=2), RecordingMonitor(every_n_steps=2)
    fit({"backend": backend}, STAGES, max_steps=5, monitor=monitor, tmp_path=tmp_path / "c")
    fit(False, STAGES, max_steps=5, monitor=eager_monitor, tmp_path=tmp_path / "e")
    assert_same_rms(monitor, eager_monitor, rel=1e-5)
    assert len(backend.shapes) == 2  # steps 1 and 3 compiled (small and grown); logging steps ran eagerly


def test_inductor_growth_rms_and_logits(tmp_path):
    """The one inductor case of the default run: a compiled (inductor) model grows mid-run, the RMS monitor logs
    ``rms/*`` after the growth with the values of the same run eager, and the compiled logits of the grown model
    equal its eager logits."""
    monitor, eager_monitor = RecordingMonitor(every_n_steps=2), RecordingMonitor(every_n_steps=2)
    module, losses, growth = fit(True, STAGES, max_steps=5, monitor=monitor, tmp_path=tmp_path / "c")
    reference, eager_losses, _ = fit(False, STAGES, max_steps=5, monitor=eager_monitor, tmp_path=tmp_path / "e")
    assert module.model._compiled_call_impl is not None and growth.summaries[0]["compile_scope"] == "whole"
    assert losses == pytest.approx(eager_losses, rel=1e-4)
    assert_same_rms(monitor, eager_monitor, rel=1e-4)  # step 4 follows a compiled step of the grown model
    x = torch.randint(0, 64, (4, 16))
    compiled = module.model(x)  # the training graph of the grown shapes (grad mode on, same input shape)
    with eager():
        plain = module.model(x)
    torch.testing.assert_close(compiled, plain, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(plain, reference.model(x), rtol=1e-3, atol=1e-4)


@pytest.mark.compile
@RUN_COMPILE
def test_resume_of_a_compiled_run_is_exact(tmp_path):
    """aot_eager (deterministic on CPU): a compiled run resumed from a checkpoint after the growth ends bit for bit
    where the uninterrupted compiled run ends."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    opts = {"backend": "aot_eager"}
    saver = ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=3, save_top_k=-1)

    def run(ckpt_path=None):
        torch.compiler.reset()
        torch.manual_seed(0)
        # the same batch every step: a resumed fit's loader restarts, and still sees the batches it would have
        batch = torch.randint(0, 64, (4, 17), generator=torch.Generator().manual_seed(1))
        data = torch.utils.data.DataLoader(batch.repeat(6, 1), batch_size=4)
        module = LitGPTPretrainModule(tiny_config(), ADAMW, max_steps=6, lr_warmup_steps=1, compile=opts)
        callbacks = [GrowthCallback(list(STAGES))] + ([saver] if ckpt_path is None else [])
        trainer = L.Trainer(max_steps=6, accelerator="cpu", logger=False, enable_progress_bar=False,
                            enable_model_summary=False, deterministic=True, callbacks=callbacks,
                            enable_checkpointing=ckpt_path is None)
        trainer.fit(module, data, ckpt_path=ckpt_path)
        return module

    full = run()
    resumed = run(str(tmp_path / "ck" / "epoch=0-step=3.ckpt"))
    assert resumed.model.config.n_embd == 64
    assert_states_equal(resumed.model.state_dict(), full.model.state_dict(), "compiled resume")
