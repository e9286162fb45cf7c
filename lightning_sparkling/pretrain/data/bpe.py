"""The byte-level BPE tokenizer of the embedded corpus: fitted on the train split (:func:`train_tokenizer`, the
``tokenizers`` library) and written in litgpt's checkpoint format (:func:`save_tokenizer_dir`: ``tokenizer.json``,
``tokenizer_config.json``, ``generation_config.json``) so ``litgpt.tokenizer.Tokenizer(dir)`` loads it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tokenizers

__all__ = ["EOS_TOKEN", "save_tokenizer_dir", "train_tokenizer"]

EOS_TOKEN = "<|endoftext|>"
"""The only special token: separates source files, and is litgpt's ``bos``/``eos``."""


def train_tokenizer(texts: Iterable[str], vocab_size: int, *, min_frequency: int = 2,
                    length: int | None = None) -> tokenizers.Tokenizer:
    """Fit a byte-level BPE tokenizer (``tokenizers`` library; ByteLevel pre-tokenizer and decoder, no prefix space,
    so encode/decode is lossless on any text) with ``<|endoftext|>`` as its only special token (id 0).

    Args:
        texts: training documents.
        vocab_size: target vocabulary size including the 256 byte symbols and ``<|endoftext|>`` (a small corpus may
            stop short of it: read the final size with ``tokenizer.get_vocab_size()``).
        min_frequency: merges seen fewer times are not learned.
        length: number of documents, for progress reporting only.

    Returns:
        a ``tokenizers.Tokenizer``.

    Example::

        >>> tok = train_tokenizer(["def f(x):\\n    return x\\n"] * 20, vocab_size=300)
        >>> tok.decode(tok.encode("def g(y): return y").ids)
        'def g(y): return y'
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < 258:
        raise ValueError(f"vocab_size={vocab_size} must be at least 258 (256 bytes, {EOS_TOKEN}, one merge)")
    if vocab_size > 2**31 - 1:
        raise ValueError(f"vocab_size={vocab_size} is too large")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[EOS_TOKEN],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer, length=length)
    return tokenizer


def save_tokenizer_dir(tokenizer: tokenizers.Tokenizer, out_dir: str | Path) -> Path:
    """Write ``tokenizer`` in litgpt's checkpoint layout, loadable by ``litgpt.tokenizer.Tokenizer(out_dir)``:
    ``tokenizer.json``, ``tokenizer_config.json`` (``PreTrainedTokenizerFast``, ``<|endoftext|>`` as bos and eos,
    ``add_bos_token: false``) and ``generation_config.json`` (``bos_token_id``/``eos_token_id``).

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` holding ``<|endoftext|>``.
        out_dir: destination folder (created).

    Example::

        >>> import tempfile
        >>> from litgpt.tokenizer import Tokenizer
        >>> d = save_tokenizer_dir(train_tokenizer(["abc abd"] * 10, vocab_size=260), tempfile.mkdtemp())
        >>> t = Tokenizer(d)
        >>> t.decode(t.encode("abd abc")), t.eos_id
        ('abd abc', 0)
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    if eos_id is None:
        raise ValueError(f"the tokenizer has no {EOS_TOKEN!r} token")
    tokenizer.save(str(out_dir / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": EOS_TOKEN, "eos_token": EOS_TOKEN,
              "add_bos_token": False, "model_max_length": 1_000_000_000}
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    generation = {"bos_token_id": eos_id, "eos_token_id": eos_id}
    (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    return out_dir
