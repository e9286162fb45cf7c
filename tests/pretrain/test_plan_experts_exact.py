"""``sparkling plan`` on more experts (issue 40, ``ExpertsChange.exact``): the quickstart model upcycled to 4 experts
(top-2), then grown to 6 experts top-3 (only experts 0 and 1 copied: the function changes) or to 12 experts top-6
(each expert copied twice: the function is kept)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_sparkling.pretrain.cli import main

QUICKSTART = str(Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml")
STAGES = ("[{at_step: 60, mlp_class_name: LLaMAMoE, n_expert: 4, n_expert_per_token: 2, rewarmup_steps: 20}, "
          "{at_step: 120, n_expert: %d, n_expert_per_token: %d, rewarmup_steps: 20}]")


@pytest.mark.parametrize("n_expert, k, line", [
    (6, 3, "experts: 4 -> 6 experts, top-2 -> top-3, copy (new 4<-0, 5<-1): function changes"),
    (12, 6, "experts: 4 -> 12 experts, top-2 -> top-6, copy (new 4<-0, 5<-1, 6<-2, 7<-3, 8<-0, 9<-1, 10<-2, 11<-3): "
            "function kept"),
])
def test_plan_says_whether_more_experts_keep_the_function(capsys, n_expert, k, line):
    assert main(["plan", "--config", QUICKSTART, "--growth.stages", STAGES % (n_expert, k)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert line in out, out
    # the upcycling keeps it in both runs; each stage's experts line and its logits line say the same
    assert out.count("function kept") == (2 if n_expert == 6 else 4)
    assert out.count("logits: function kept") == (1 if n_expert == 6 else 2)
