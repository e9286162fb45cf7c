"""Write the checkpoint fixtures of ``tests/pretrain/test_resume_old_checkpoint.py``: a tiny grown run's checkpoint
after the growth, written by the code on ``PYTHONPATH``, and the weights the same code ends with when it resumes from
it.

Run with the package first on the path, e.g. (from the repository root)::

    PYTHONPATH=.:tests python tests/make_resume_fixture.py tests/fixtures

To check that a later change still resumes a stored checkpoint, write the fixtures with an earlier commit first on
the path (``git worktree add --detach /tmp/old <commit>``; ``PYTHONPATH=/tmp/old:tests``).

Each case writes ``resume_<case>.ckpt`` (the checkpoint at step ``SAVE``) and ``resume_<case>_final.pt`` (the
model's state_dict after resuming to ``MAX_STEPS``), both small (a 1-layer GPT of width 16 grown to 24).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from _tiny import TinyModule, make_trainer, paper_stage, tiny_config

MAX_STEPS, SAVE = 12, 7
CONFIG = dict(n_embd=16, n_head=2, n_query_groups=1, n_layer=1, intermediate_size=32)


def stages():

    return [paper_stage(3, n_embd=24, intermediate_size=48, rewarmup_steps=2, bias_correction="fresh"),
            paper_stage(5, intermediate_size=64, rewarmup_steps=2, symmetry_target=0.5, symmetry_interval=1)]


class WSDModule(TinyModule):
    """TinyModule under a WSD baseline (``LambdaLR(WSDLambda)``, decay over the last half)."""

    def _schedule(self, opt):
        from lightning_sparkling.growth.schedules import WSDLambda

        return torch.optim.lr_scheduler.LambdaLR(opt, WSDLambda(2, self.max_steps, 0.1, decay_fraction=0.5))


MODULES = {"cosine": TinyModule, "wsd": WSDModule}


def callback():
    from lightning_sparkling import GrowthCallback

    return GrowthCallback(stages(), seed=3)


def fit(case: str, ckpt_dir: Path | None = None, ckpt_path: str | None = None) -> TinyModule:
    module = MODULES[case](tiny_config(**CONFIG), lr=1e-2, max_steps=MAX_STEPS)
    extra = []
    if ckpt_dir is not None:
        extra.append(ModelCheckpoint(dirpath=ckpt_dir, every_n_train_steps=SAVE, save_top_k=-1, filename=case))
    trainer = make_trainer([*extra, callback()], max_steps=MAX_STEPS, enable_checkpointing=ckpt_dir is not None)
    trainer.fit(module, ckpt_path=ckpt_path)
    return module


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for case in MODULES:
        tmp = out / f".{case}"
        fit(case, ckpt_dir=tmp)
        ckpt = out / f"resume_{case}.ckpt"
        (tmp / f"{case}.ckpt").replace(ckpt)
        tmp.rmdir()
        resumed = fit(case, ckpt_path=str(ckpt))
        torch.save({k: v.clone() for k, v in resumed.model.state_dict().items()}, out / f"resume_{case}_final.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
