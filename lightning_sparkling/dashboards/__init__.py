"""Reading a run back: plots from TensorBoard event files (:mod:`~lightning_sparkling.dashboards.plotting`) and the
custom-scalars layout that overlays all blocks per quantity (:mod:`~lightning_sparkling.dashboards.tb_layout`)."""
