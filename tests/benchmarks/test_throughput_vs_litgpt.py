"""benchmarks/throughput_vs_litgpt.py: the steady-state tokens/s it reads from both tools' logs, the ratios, and its
tiny mode end to end (litgpt and sparkling each train the same tiny model; slow)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "throughput_vs_litgpt.py"


def _module():
    spec = importlib.util.spec_from_file_location("throughput_vs_litgpt", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_steady_state_leaves_out_the_warmup_steps(tmp_path):
    tvl = _module()
    # cumulative (time, tokens) per step: the first step ends 5 s in, the second (compiling) 3 s later, then 100
    # tokens every 0.5 s
    times = [5.0, 8.0, 8.5, 9.0, 9.5, 10.0]
    metrics = tmp_path / "logs" / "metrics.csv"
    metrics.parent.mkdir()
    rows = ["step,time,lengths,loss"] + [f"{s},{t},{100 * (s + 1)}," for s, t in enumerate(times)]
    rows.insert(3, "1,,,2.5")  # a row of other metrics at the same step
    metrics.write_text("\n".join(rows) + "\n")
    read = tvl.read_csv(tmp_path, "time", "lengths")
    assert read == [(t, 100 * (s + 1)) for s, t in enumerate(times)]
    assert tvl.steady_tokens_per_sec(read, warmup=1) == pytest.approx(200.0)  # the slow second step left out
    assert tvl.steady_tokens_per_sec(read, warmup=0) == pytest.approx(100.0)
    with pytest.raises(RuntimeError, match="6 steps logged"):
        tvl.steady_tokens_per_sec(read, warmup=5)
    # one step stalled by another process: the mean over the window feels it, the median step does not
    stalled = read[:4] + [(t + 10, n) for t, n in read[4:]]
    assert tvl.steady_tokens_per_sec(stalled, warmup=1) == pytest.approx(400 / 12)
    assert tvl.median_step_tokens_per_sec(stalled, warmup=1) == pytest.approx(200.0)


def test_ratios_are_taken_per_repeat():
    tvl = _module()
    runs = [{"variant": v, "repeat": r, "tokens_per_sec": t} for v, r, t in
            [("litgpt", 0, 100.0), ("sparkling", 0, 99.0), ("litgpt", 1, 50.0), ("sparkling", 1, 51.0)]]
    summary = tvl.summarize(runs, ["litgpt", "sparkling"])
    assert summary["litgpt"]["median"] == 75.0 and summary["litgpt"]["min"] == 50.0
    assert summary["sparkling"]["ratios"] == pytest.approx([0.99, 1.02])
    assert summary["sparkling"]["ratio_median"] == pytest.approx(1.005)


def test_both_tools_get_the_same_model_batch_precision_and_optimizer(tmp_path):
    tvl = _module()
    args = tvl.argparse.Namespace(precision="32-true", accelerator="cpu", steps=8, rms_every=50, workdir=tmp_path,
                                  compile="false", threads=1)
    size = tvl.SIZES["tiny"]
    lit = tvl.litgpt_config(args, size, tmp_path / "text", tmp_path / "a", tmp_path / "tok")
    spark = tvl.sparkling_config(args, size, tmp_path / "text", tmp_path / "b", "sparkling+rms")
    for key in ("model_config", "precision", "optimizer"):
        assert lit[key] == spark[key], key
    assert {k: lit["train"][k] for k in ("global_batch_size", "micro_batch_size", "max_norm")} == \
           {k: spark["train"][k] for k in ("global_batch_size", "micro_batch_size", "max_norm")}
    assert lit["train"]["max_tokens"] == spark["train"]["max_steps"] * size["batch"] * size["seq"]
    assert spark["data"]["seq_len"] == lit["model_config"]["block_size"] == size["seq"]
    assert spark["rms_monitor"] == {"every_n_steps": 50}
    assert tvl.sparkling_config(args, size, tmp_path, tmp_path, "sparkling")["rms_monitor"] is None
    assert tvl.sparkling_config(args, size, tmp_path, tmp_path, "sparkling+ac")["activation_checkpointing"] is True
    assert "activation_checkpointing" not in spark
    cmd, env = tvl.command("litgpt", tmp_path / "c.yaml", args)
    assert env["TORCHDYNAMO_DISABLE"] == "1" and cmd[1:4] == ["-m", "litgpt", "pretrain"]


def test_rms_steps_timed_counts_the_measured_steps_inside_the_window():
    tvl = _module()
    ns = tvl.argparse.Namespace
    assert tvl.rms_steps_timed(ns(warmup=5, steps=30, rms_every=50)) == 0  # only step 0: before the window
    assert tvl.rms_steps_timed(ns(warmup=5, steps=30, rms_every=10)) == 2  # steps 10 and 20
    assert tvl.rms_steps_timed(ns(warmup=2, steps=6, rms_every=1)) == 3  # steps 3, 4, 5


@pytest.mark.slow
def test_tiny_mode_end_to_end(tmp_path):
    record = _module().main(["--tiny", "--repeats", "1", "--activation-checkpointing", "--workdir",
                             str(tmp_path / "work"), "--out", str(tmp_path / "out.json")])
    saved = json.loads((tmp_path / "out.json").read_text())
    assert saved["summary"] == record["summary"] and saved["params"] == record["params"] > 0
    assert saved["rms_steps_timed"] == 1  # the monitor measured step 4, inside the window
    assert [r["variant"] for r in saved["runs"]] == ["litgpt", "sparkling", "sparkling+rms", "sparkling+ac"]
    for run in saved["runs"]:
        assert run["steps_logged"] == 6 and run["tokens_per_sec"] > 0, run
    for figure in ("tokens_per_sec", "median_step_tokens_per_sec"):
        summary = saved["summary"][figure]
        for variant in ("sparkling", "sparkling+rms", "sparkling+ac"):
            s = summary[variant]
            assert s["ratio_median"] == pytest.approx(s["median"] / summary["litgpt"]["median"])
    again = _module().main(["--report-only", "--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "out.json")])
    assert again["summary"] == saved["summary"]  # measured again from the runs' logs: the same figures
