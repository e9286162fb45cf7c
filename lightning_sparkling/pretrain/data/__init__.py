"""The data of a run (the lowest layer of :mod:`lightning_sparkling.pretrain`): the embedded corpus
(:mod:`~lightning_sparkling.pretrain.data.corpus`), its byte-level BPE (:mod:`~lightning_sparkling.pretrain.data.bpe`),
the token cache (:mod:`~lightning_sparkling.pretrain.data.token_cache`), token windows
(:mod:`~lightning_sparkling.pretrain.data.windows`), ``TextCorpusDataModule``
(:mod:`~lightning_sparkling.pretrain.data.datamodule`) and litgpt's data modules
(:mod:`~lightning_sparkling.pretrain.data.litgpt_data`). Imports no other sub-package of ``pretrain``.
"""
