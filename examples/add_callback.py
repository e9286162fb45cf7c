"""Width growth in your own Lightning code: a minimal LightningModule around a litgpt ``GPT``, and two callbacks
added to the ``Trainer``. Nothing else of lightning-sparkling is used.

    python examples/add_callback.py            # CPU, well under a minute
    tensorboard --logdir out/add_callback      # rms/..., growth/..., the CUSTOM SCALARS tab

The model is widened at step 60 (hidden 32 -> 64, MLP 64 -> 128); the callback patches the optimizer and gives
the new entries their own re-warmup LR. The data are random learnable token sequences (each row counts up by a
fixed stride, mod the vocabulary), so the loss falls quickly and visibly keeps falling after the growth.
"""

import logging
import warnings

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.loggers import TensorBoardLogger
from litgpt import GPT, Config

from lightning_sparkling import ActivationRMSMonitor, GrowthCallback, GrowthStage

VOCAB, SEQ, STEPS = 128, 32, 120


class TinyGPT(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = GPT(Config(n_layer=2, n_embd=32, n_head=4, intermediate_size=64, vocab_size=VOCAB,
                                padded_vocab_size=VOCAB, block_size=SEQ, mlp_class_name="LLaMAMLP",
                                norm_class_name="RMSNorm", bias=False, parallel_residual=False))
        self.example_input_array = torch.zeros(1, SEQ, dtype=torch.long)  # the model summary measures its FLOPs

    def forward(self, idx):
        return self.model(idx)

    def training_step(self, batch, batch_idx):
        logits = self.model(batch[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=3e-3, weight_decay=0.1, betas=(0.9, 0.95))
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=STEPS, eta_min=3e-5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class ProgressBar(RichProgressBar):
    """Lightning's bar without the logger's version number (``v_num``), which says nothing about the run."""

    def get_metrics(self, trainer, pl_module):
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items


def quiet_lightning_output() -> None:
    """Leave out what is not this example's output: Lightning's device lines and LitLogger tip (a filter on its
    ``rank_zero`` logger, so the growth log still prints), and a ``FutureWarning`` its pytree helper raises on
    recent torch."""
    noise = ("GPU available: ", "TPU available: ", "\N{ELECTRIC LIGHT BULB} Tip: ")
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(
        lambda record: not str(record.msg).startswith(noise))
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                            category=FutureWarning)


def random_runs(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, VOCAB, (n, 1), generator=g)
    stride = torch.randint(1, 5, (n, 1), generator=g)
    return (start + stride * torch.arange(SEQ + 1)) % VOCAB


if __name__ == "__main__":
    quiet_lightning_output()
    torch.manual_seed(0)
    data = torch.utils.data.DataLoader(random_runs(STEPS * 16), batch_size=16)
    trainer = L.Trainer(
        max_steps=STEPS, max_epochs=1,  # the data are one epoch of STEPS batches (the bar reads "Epoch 0/0")
        accelerator="cpu", logger=TensorBoardLogger("out", name="add_callback"), log_every_n_steps=5,
        enable_checkpointing=False,
        callbacks=[
            # recipe auto: random-zero-3x under this cosine schedule, what `sparkling pretrain` grows by (the log says)
            GrowthCallback(GrowthStage(60, n_embd=64, intermediate_size=128, rewarmup_steps=10)),
            ActivationRMSMonitor(every_n_steps=10),
            ProgressBar(),
        ],
    )
    trainer.fit(TinyGPT(), data)
    print(f"final width: n_embd={trainer.lightning_module.model.config.n_embd}, "
          f"train_loss={float(trainer.callback_metrics['train_loss']):.3f}")
