"""benchmarks/throughput_vs_litgpt.py: the steady-state tokens/s it reads from both tools' logs, the FLOPs per batch
it reads back from their logged FLOP/s, the ratios, and its tiny mode end to end (litgpt and sparkling each train the
same tiny model, and count the same FLOPs per batch within 1%; slow)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from litgpt import Config

from _litgpt_flops import litgpt_measured_flops

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


def _lightning_log(path: Path, keys: tuple[str, ...], flops: float, times: list[float]) -> None:
    """A metrics.csv as a tool writes it: Lightning's own ``Throughput`` (window 5) fed one batch of ``flops`` FLOPs
    per step at ``times``, its ``flops_per_sec`` logged under the tool's key."""
    from lightning.fabric.utilities.throughput import Throughput

    time_key, tokens_key, flops_key, _ = keys
    throughput = Throughput(window_size=5)
    rows = ["step," + ",".join((time_key, tokens_key, flops_key, "loss"))]
    for step, t in enumerate(times):
        throughput.update(time=t, batches=step + 1, samples=2 * (step + 1), lengths=32 * (step + 1), flops=flops)
        rate = throughput.compute().get("device/flops_per_sec")  # from the fifth step on
        rows += [f"{step},{t!r},{32 * (step + 1)},{'' if rate is None else repr(rate)},",
                 f"{step},,,,2.5"]  # another row of the same step
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(rows) + "\n")


def test_flops_per_batch_is_read_back_from_the_logged_flops_per_sec(tmp_path):
    tvl = _module()
    times = [3.0, 3.7, 4.1, 4.9, 5.2, 6.0, 6.45, 7.1]  # uneven steps: the window's seconds matter
    for tool, flops in (("litgpt", 9437184), ("sparkling", 9437184 * 1.004)):
        _lightning_log(tmp_path / tool / "logs" / "metrics.csv", tvl.KEYS[tool], flops, times)
        steps = tvl.read_steps(tmp_path / tool)
        assert sorted(steps) == list(range(8)) and steps[3]["loss"] == 2.5
        _, _, flops_key, mfu_key = tvl.KEYS[tool]
        assert tvl.flops_per_batch_from_log(steps, tvl.KEYS[tool][0], flops_key) == pytest.approx(flops, rel=1e-9)
        assert tvl.median_mfu(steps, mfu_key, warmup=2) is None  # no peak known: no MFU
        with pytest.raises(RuntimeError, match="FLOP/s window"):
            tvl.flops_per_batch_from_log({7: steps[7]}, tvl.KEYS[tool][0], flops_key)
    assert tvl.flops_per_batch_from_log({0: {"time": 1.0}}, "time", "device/flops_per_sec") is None
    assert tvl.median_mfu({s: {"device/mfu": 0.1 * s} for s in range(6)}, "device/mfu", warmup=3) == \
        pytest.approx(0.4)
    runs = [{"variant": "litgpt", "repeat": 0, "tokens_per_sec": 1.0, "median_step_tokens_per_sec": 1.0,
             "flops_per_batch": 100.0, "mfu": None},
            {"variant": "sparkling", "repeat": 0, "tokens_per_sec": 1.0, "median_step_tokens_per_sec": 1.0,
             "flops_per_batch": 100.5, "mfu": None}]
    summary = tvl.summaries(runs, ["litgpt", "sparkling"])
    assert set(summary) == {"tokens_per_sec", "median_step_tokens_per_sec", "flops_per_batch"}  # no MFU on a CPU
    assert summary["flops_per_batch"]["sparkling"]["ratio_median"] == pytest.approx(1.005)


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
        assert run["mfu"] is None  # a CPU: Lightning knows no peak
    # the same FLOPs per batch in both tools' logs (litgpt's measure_flops figure), activation checkpointing's
    # recomputation not counted (MFU counts the model's FLOPs)
    tvl = _module()
    expected = litgpt_measured_flops(Config(**tvl.model_config(tvl.SIZES["tiny"])), tvl.SIZES["tiny"]["batch"])
    for run in saved["runs"]:
        assert run["flops_per_batch"] == pytest.approx(expected, rel=0.01), run
        if run["variant"] != "litgpt":
            assert run["flops_per_batch_logged"] == expected
    for variant in ("sparkling", "sparkling+rms", "sparkling+ac"):
        assert saved["summary"]["flops_per_batch"][variant]["ratio_median"] == pytest.approx(1.0, abs=0.01)
    assert "mfu" not in saved["summary"]
    for figure in ("tokens_per_sec", "median_step_tokens_per_sec", "flops_per_batch"):
        summary = saved["summary"][figure]
        for variant in ("sparkling", "sparkling+rms", "sparkling+ac"):
            s = summary[variant]
            assert s["ratio_median"] == pytest.approx(s["median"] / summary["litgpt"]["median"])
    again = _module().main(["--report-only", "--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "out.json")])
    assert again["summary"] == saved["summary"]  # measured again from the runs' logs: the same figures


def test_the_record_is_rewritten_around_every_run_and_says_what_stopped_it(tmp_path, monkeypatch, capsys):
    """The GPU checks of 2026-11-28: the throughput step ran out of its time and left no JSON (it was written at the
    end of a repeat). Now ``--out`` is rewritten before the setup and around every run (``"complete": false``, the runs
    done, the one going on), a line is printed as each run starts and ends, and a failed run is named in the record;
    the runs here are stand-ins (no training)."""
    tvl = _module()
    out = tmp_path / "out.json"
    seen, fail = [], ["sparkling+rms"]

    def fake_run(variant, args, size, text, tokenizer, rep):
        seen.append(json.loads(out.read_text()))  # what a timeout during this run would leave
        if variant in fail:
            raise RuntimeError(f"{variant} failed (exit 1): torch.OutOfMemoryError: CUDA out of memory; log x")
        return {"variant": variant, "repeat": rep, "tokens_per_sec": 100.0 if variant == "litgpt" else 90.0,
                "median_step_tokens_per_sec": 100.0, "steps_logged": 6, "flops_per_batch": None, "mfu": None,
                "wall_s": 2.4, "load_1min": 0.1}

    monkeypatch.setattr(tvl, "prepare", lambda args, size: (tmp_path / "text", tmp_path / "tokenizer"))
    monkeypatch.setattr(tvl, "run_one", fake_run)
    argv = ["--tiny", "--repeats", "1", "--workdir", str(tmp_path / "work"), "--out", str(out)]
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        tvl.main(argv)
    assert [s["running"].split(",")[0] for s in seen] == ["litgpt repeat 0", "sparkling repeat 0",
                                                          "sparkling+rms repeat 0"]
    assert seen[0]["runs"] == [] and seen[0]["summary"] == {} and seen[0]["complete"] is False
    assert [r["variant"] for r in seen[2]["runs"]] == ["litgpt", "sparkling"]
    assert seen[2]["summary"]["tokens_per_sec"]["sparkling"]["ratio_median"] == pytest.approx(0.9)
    saved = json.loads(out.read_text())
    assert saved["complete"] is False and saved["repeats_done"] == 0 and len(saved["runs"]) == 2
    assert saved["running"].startswith("sparkling+rms repeat 0")
    assert saved["error"] == ("RuntimeError: sparkling+rms failed (exit 1): torch.OutOfMemoryError: CUDA out of "
                              "memory; log x")
    printed = capsys.readouterr().out
    assert "litgpt repeat 0: start, 6 steps" in printed
    assert "sparkling repeat 0: done, 6 steps, 90.0 tokens/s, 2 s" in printed
    fail.clear()  # every run finishes: the whole record, as before, marked complete
    record = tvl.main(argv)
    saved = json.loads(out.read_text())
    assert saved == record and saved["complete"] is True and saved["repeats_done"] == 1
    assert "running" not in saved and "error" not in saved and len(saved["runs"]) == 3
    assert set(saved["summary"]["tokens_per_sec"]) == {"litgpt", "sparkling", "sparkling+rms"}
    assert not list(tmp_path.glob("*.tmp"))


def test_the_setup_run_is_eager_whatever_the_benchmark_compiles(tmp_path, monkeypatch):
    """The one-step setup run only trains the tokenizer and fills the token cache: with ``--compile true`` it stays
    eager (on one H200 a compile there cost a compile's time before any timed run, 2026-11-28); the timed runs
    compile."""
    tvl = _module()
    commands = []

    def fake_run(cmd, **kwargs):
        commands.append(cmd)
        (tmp_path / "work" / "setup" / "final").mkdir(parents=True)
        (tmp_path / "work" / "setup" / "final" / "tokenizer.json").write_text("{}")
        return tvl.subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(tvl.subprocess, "run", fake_run)
    args = tvl.argparse.Namespace(precision="bf16-mixed", accelerator="cpu", steps=8, rms_every=50, threads=1,
                                  workdir=tmp_path / "work", compile="true", max_bytes=20_000, timeout=60)
    (tmp_path / "work").mkdir()
    tvl.prepare(args, tvl.SIZES["tiny"])
    assert len(commands) == 1 and commands[0][-2:] == ["--compile", "false"], commands
    assert args.compile == "true"  # the benchmark's own runs still compile
    assert tvl.command("sparkling", tmp_path / "c.yaml", args)[0][-2:] == ["--compile", "true"]
