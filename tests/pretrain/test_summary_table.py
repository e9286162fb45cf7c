"""The end-of-run table of an interrupted run says what its FLOPs and val loss cover (issue 40)."""

from __future__ import annotations

import pytest

from lightning_sparkling.pretrain.training.summary import print_summary_table

SUMMARY = dict(steps=33, max_steps=60, tokens=33 * 256, growth=[], total_params=[100, 200], flops=1.0e12,
               flops_from_scratch=1.5e12, flops_saved=0.364, train_loss=4.0, train_loss_last10=4.1, val_loss=3.9,
               val_ppl=49.4, wall_clock_seconds=10.0, fit_seconds=9.0, final_dir=None)


@pytest.mark.parametrize("status", ["interrupted", "completed"])
def test_an_interrupted_runs_flops_and_val_loss_say_the_steps_they_cover(status, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # one table row per line
    print_summary_table({**SUMMARY, "status": status})
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip()
            for line in capsys.readouterr().out.splitlines() if line.count("│") == 3}
    covers = "(covers the 33 of 60 steps run)"
    for row in ("training FLOPs", "FLOPs saved", "final val loss / ppl"):
        assert rows[row].endswith(covers) is (status == "interrupted"), rows[row]
    assert rows["FLOPs saved"].startswith("36.4%")
    assert ("status" in rows) is (status == "interrupted")
