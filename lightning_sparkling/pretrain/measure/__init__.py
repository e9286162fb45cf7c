"""``sparkling measure``: a measurement's runs (:mod:`~lightning_sparkling.pretrain.measure.measure_runs`, trained as
``sparkling pretrain`` subprocesses), their statistics (:mod:`~lightning_sparkling.pretrain.measure.measure_stats`) and
the command with its cell in the map's format (:mod:`~lightning_sparkling.pretrain.measure.command`). The top layer
below ``cli``: it imports ``training`` and ``advice``.
"""
