"""The README's advice examples are what the commands print: its ``progressive:`` block and the same schedule in the
stages form plan to one cell, the 20+ tokens-per-parameter one; the ``--suggest`` example on ``model_name:
pythia-160m`` with no growth (docs/REFERENCE.md, linked from the README) prints exactly the output shown there."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

from lightning_sparkling.pretrain.advice.measured import load_map
from lightning_sparkling.pretrain.advice.planning import plan
from lightning_sparkling.pretrain.cli import main, parse

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_cli import write_config
from test_suggest import Q8, _wsd

README = Path(__file__).resolve().parents[2] / "README.md"
REFERENCE = README.parent / "docs" / "REFERENCE.md"


def _yaml_blocks(page: Path = README) -> list[str]:
    return re.findall(r"```yaml\n(.*?)\n```", page.read_text(), flags=re.S)


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_progressive_form_and_its_stages_form_cite_the_20_plus_cell(tmp_path):
    """Both forms, pasted into the issue's 2-layer start (the quickstart's blocks, WSD, 20 tokens per parameter of the
    8-layer model, 1.05M parameters), are one plan with one name and cite the same 20+ tokens-per-parameter cell: the
    one nearest in size, 1.38M, where the schedule showed no measurable difference (what the README says)."""
    forms = [yaml.safe_load(b)["growth"] for b in _yaml_blocks() if b.startswith("growth:") and
             ("progressive:" in b or "depth_init: copy" in b)]
    assert len(forms) == 2 and "progressive" in forms[0] and "stages" in forms[1], forms
    cited = []
    for k, growth in enumerate(forms):
        config = {**_wsd(tmp_path, {**Q8, "n_layer": 2}), "growth": growth}
        _, run, _ = parse(["--config", str(write_config(tmp_path / f"form{k}.yaml", config))], "plan")
        assert [(s.at_step, s.n_layer, s.depth_init) for s in run.stages] == [(5125, 4, "copy"), (7688, 8, "copy")]
        advice = plan(run, print_report=False)["regime_advice"]
        assert advice.startswith("no measurable difference near this run") and "nothing was measured" not in advice
        cited.append(re.search(r"\): (depth \(depth_init copy\).*?tokens per parameter: .*? seeds)", advice).group(1))
    assert cited[0] == cited[1] and re.search(r"growths at 50%, 75%, 2\d\.\d tokens per parameter", cited[0])
    (cell,) = [c for c in load_map() if c.describe().startswith(cited[0])]
    assert cell.tokens_per_param >= 20 and len(cell.stages) == 2 and not cell.pays and cell.params == 1_377_888
    text = _flat(README.read_text())
    assert "For a llama model above about 0.5M parameters, so at every size users train, it prints no block" in text


def test_a_llama_model_at_a_size_users_train_gets_no_block(tmp_path, capsys):
    """What the README says of llama models above ~0.5M: Llama-2-7b at 20 tokens per parameter under WSD gets no block,
    the 1.38M cell as the nearest evidence (flagged as over 10x apart) and the advice to measure."""
    config = {"model_name": "Llama-2-7b-hf", "out_dir": str(tmp_path / "out"), "precision": "bf16-mixed",
              "data": {"source": "stdlib", "vocab_size": 32000, "seq_len": 2048},
              "train": {"global_batch_size": 512, "micro_batch_size": 8, "max_tokens": 140_000_000_000,
                        "lr_schedule": "wsd", "lr_decay_fraction": 0.1},
              "optimizer": {"class_path": "torch.optim.AdamW", "init_args": {"lr": 0.0003}}, "growth": {"stages": []}}
    assert main(["plan", "--config", str(write_config(tmp_path / "llama7b.yaml", config)), "--suggest"]) == 0
    out = capsys.readouterr().out
    assert "growth:" not in out and out.startswith("no measured growth fits this run: growth of this kind paid only")
    assert "Evidence that transfers (cpu-1m-sp, stages-248-copy)): no measurable difference" in out, out
    assert "over 10x apart in size" in out and out.rstrip().endswith("sparkling measure --config RUN.yaml")


def test_the_suggest_example_prints_what_the_reference_shows(tmp_path, capsys):
    assert "(docs/REFERENCE.md#plan---suggest-on-pythia-160m)" in README.read_text()  # the README links it
    text = REFERENCE.read_text()
    (config,) = [yaml.safe_load(b) for b in _yaml_blocks(REFERENCE)
                 if "model_name: pythia-160m" in b and "stages: []" in b]
    assert config["growth"] == {"stages": []} and config["train"]["lr_schedule"] == "wsd"
    path = write_config(tmp_path / "pythia_160m.yaml", config)
    shown = re.search(r"sparkling plan --config pythia_160m.yaml --suggest\n```\n+```text\n(.*?)\n```", text,
                      flags=re.S)
    assert shown, "docs/REFERENCE.md: the --suggest example's output block"
    assert main(["plan", "--config", str(path), "--suggest"]) == 0
    assert _flat(capsys.readouterr().out) == _flat(shown.group(1))
