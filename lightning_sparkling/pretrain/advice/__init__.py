"""What the project's evidence says about a run, and its plan: the measured map
(:mod:`~lightning_sparkling.pretrain.advice.measured`, ``measured.json`` beside it; the cells' sizes, categories and
verdict words), a cell's schedule toward a target model (:mod:`~lightning_sparkling.pretrain.advice.target`), the run
plan computed once per command (:mod:`~lightning_sparkling.pretrain.advice.run_plan`), ``sparkling plan``
(:mod:`~lightning_sparkling.pretrain.advice.planning`) and ``--suggest``
(:mod:`~lightning_sparkling.pretrain.advice.suggest`). Imports ``config`` and the layers below it.
"""
