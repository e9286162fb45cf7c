"""benchmarks/gpu_checks.sh in its CPU mode: the steps it runs and their arguments (dry), each step under its own
timeout within the deadline, the campaign given the deadline as an epoch, results and status in $OUT."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_checks.sh"


def _run(tmp_path: Path, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    # no wheels (a developer's .whl/ for the GPU machine is not this environment's), so PYTHONPATH stays the test's
    full = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": sys.executable, "WHEELS": str(tmp_path / "no-wheels"),
            **env}
    return subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=full, capture_output=True, text=True, timeout=timeout)


def _steps(tmp_path: Path) -> dict[str, str]:
    lines = (tmp_path / "out" / "steps.txt").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines)


def _stub(tmp_path: Path, body: str) -> Path:
    stub = tmp_path / "campaign.py"
    stub.write_text(f"import sys, time\n{body}\n")
    return stub


def _compile_script(tmp_path: Path, scopes: bool) -> Path:
    """A stand-in for benchmarks/compile_cost.py with (or without) its ``--scopes`` option: the script reads which."""
    stub = tmp_path / ("scopes.py" if scopes else "no_scopes.py")
    stub.write_text('parser.add_argument("--scopes")\n' if scopes else 'parser.add_argument("--steps")\n')
    return stub


def test_gpu_mode_runs_the_four_checks_in_order_within_nine_minutes(tmp_path):
    """The issue's four steps, one after another, each alone on the device: throughput against litgpt compiled in
    bf16-mixed at the gpu size, whole-GPT against per-block compile around a growth, the growth cost at about 1B
    parameters, the GPU tests with the time that is left, all within the default DEADLINE of 540 s."""
    proc = _run(tmp_path, DRY="1", COMPILE_SCRIPT=str(_compile_script(tmp_path, scopes=True)))
    assert proc.returncode == 0, proc.stderr
    steps = _steps(tmp_path)
    assert list(steps) == ["throughput", "compile_scope", "growth_cost", "tests"]
    for arg in ("--compile true", "--precision bf16-mixed", "--accelerator gpu", "--size gpu"):
        assert arg in steps["throughput"], arg
    # whole against per block on the throughput step's gpu-size model, bf16, on the device
    for arg in ("--scopes", "--device cuda", "--bf16", "--n-layer 12", "--n-embd 768", "--seq 1024", "--batch 8"):
        assert arg in steps["compile_scope"], arg
    assert "--device cuda --sizes 1.4B " in steps["growth_cost"]
    # each GPU test's outcome printed as it ends (-v, not cancelled by a -q), 120 s at most per test, failures and
    # errors summarized: a step cut short by its timeout still says which test failed
    assert steps["tests"].endswith(" -v -rfEs --timeout 120 -m gpu -n 3 tests") and " -q " not in steps["tests"]
    script = SCRIPT.read_text()
    budgets = [int(script.split(f"{name}=")[1].split()[0]) for name in ("THROUGHPUT_S", "COMPILE_S", "COST_S")]
    assert sum(budgets) <= 540 - 20 - 120  # the timed steps leave the tests two minutes, the pack 20 s
    assert 'DEADLINE=${DEADLINE:-540}' in script


def test_a_compile_cost_without_scopes_is_run_as_it_is(tmp_path):
    proc = _run(tmp_path, DRY="1", STEPS="compile_scope", COMPILE_SCRIPT=str(_compile_script(tmp_path, scopes=False)))
    assert proc.returncode == 0, proc.stderr
    command = _steps(tmp_path)["compile_scope"]
    assert "--scopes" not in command and "--grow-at" in command and "--device" not in command, command


def test_the_smoke_and_the_campaign_run_when_named(tmp_path):
    """The smoke (every example, 12 steps, its own precision, compile auto, all 7 at once, then the CLI's GPU tests)
    first, and the campaign beside the tests, only when STEPS names them."""
    proc = _run(tmp_path, DRY="1", STEPS="smoke throughput campaign tests", CAMPAIGN=str(_stub(tmp_path, "")))
    assert proc.returncode == 0, proc.stderr
    steps = _steps(tmp_path)
    assert list(steps) == ["smoke_examples", "smoke_tests", "throughput", "campaign", "tests"]
    for arg in ("--steps 12", "--compile auto", "--table", "--jobs 7", "--timeout 210"):
        assert arg in steps["smoke_examples"], arg
    assert "--tiny" not in steps["smoke_examples"] and steps["smoke_tests"].endswith("tests/pretrain/test_cli_gpu.py")
    deadline = int(steps["campaign"].split("--deadline ")[1])
    assert abs(deadline - (time.time() + 540 - 40)) < 15  # the default DEADLINE, less the time to stop and pack
    # only $OUT comes back from the device: the campaign appends there, starting from the committed results
    out = tmp_path / "out"
    assert f"--results {out}/campaign.jsonl" in steps["campaign"] and "--tiny" not in steps["campaign"]
    committed = ROOT / "benchmarks" / "results" / "campaign.jsonl"
    assert (out / "campaign.jsonl").read_bytes() == committed.read_bytes()


def test_cpu_mode_runs_the_tiny_campaign(tmp_path):
    proc = _run(tmp_path, MODE="cpu", DRY="1", STEPS="campaign", CAMPAIGN=str(_stub(tmp_path, "")))
    assert proc.returncode == 0, proc.stderr
    campaign = _steps(tmp_path)["campaign"]
    assert "--tiny" in campaign and f"--results {tmp_path / 'out'}/campaign_tiny.jsonl" in campaign, campaign


def test_cpu_mode_is_tiny_and_skips_a_missing_campaign(tmp_path):
    proc = _run(tmp_path, MODE="cpu", DRY="1", STEPS="smoke throughput compile_scope growth_cost campaign tests",
                CAMPAIGN=str(tmp_path / "missing.py"), COMPILE_SCRIPT=str(_compile_script(tmp_path, scopes=True)))
    assert proc.returncode == 0, proc.stderr
    steps = _steps(tmp_path)
    assert list(steps) == ["smoke_examples", "smoke_tests", "throughput", "compile_scope", "growth_cost", "tests"]
    assert "--tiny" in steps["smoke_examples"] and "--collect-only" in steps["smoke_tests"]
    # the arguments tests/benchmarks/test_throughput_vs_litgpt.py's tiny run trains with (its end-to-end check)
    assert "--tiny --accelerator cpu --precision 32-true --compile false --repeats 1" in steps["throughput"]
    assert "--scopes" in steps["compile_scope"] and "--backend eager" in steps["compile_scope"]
    assert "--device cpu" in steps["growth_cost"] and "--collect-only" in steps["tests"]
    assert "campaign skipped" in (tmp_path / "out" / "status.txt").read_text()


def test_a_bad_mode_is_refused(tmp_path):
    proc = _run(tmp_path, MODE="tpu", DRY="1")
    assert proc.returncode == 2 and "error: MODE=tpu" in proc.stderr


def test_the_campaign_gets_the_deadline_and_its_own_timeout(tmp_path):
    """A campaign that would run past the deadline is stopped by its step's timeout; the status says so, within
    the deadline. Robust to a loaded machine: the preflight imports only ``json`` (and torch, for its versions line),
    so it cannot eat the campaign's time, and the deadline the campaign gets is checked against the script's own
    start (between the test's start and the script's end), not against a tolerance."""
    record = tmp_path / "argv.txt"
    stub = _stub(tmp_path, f"open({str(record)!r}, 'w').write(' '.join(sys.argv[1:])); print('cell 1 done')\n"
                           "time.sleep(600)")
    deadline = 45
    start = time.time()
    proc = _run(tmp_path, MODE="cpu", STEPS="campaign", DEADLINE=str(deadline), CAMPAIGN=str(stub), NEEDS="json")
    took = time.time() - start
    assert proc.returncode == 0, proc.stderr
    assert took < deadline, took
    argv = record.read_text().split()
    at = argv.index("--deadline")  # after the mode's own arguments (the CPU mode: --tiny, its results in $OUT)
    script_start = int(argv[at + 1]) - (deadline - 40)  # END = T0 + DEADLINE - 40
    assert "--tiny" in argv[:at] and int(start) <= script_start <= start + took, (start, script_start, took)
    status = (tmp_path / "out" / "status.txt").read_text()
    assert "campaign exit 124" in status, status  # killed by its timeout (time left - 20 s)
    assert status.startswith("preflight exit 0 "), status  # the preflight's line first
    assert "cell 1 done" in (tmp_path / "out" / "campaign.log").read_text()
    assert (tmp_path / "out" / "all.tgz").is_file()


def test_the_cpu_rehearsal_runs_the_compile_step_for_real(tmp_path):
    """MODE=cpu for real, as on the device: the wheels (none), the preflight of every package the steps import, the
    compile step (benchmarks/compile_cost.py, tiny) writing its status line and its JSON, then the pack. The other
    steps' CPU commands run end to end in their scripts' own tests, with these arguments (throughput:
    tests/benchmarks/test_throughput_vs_litgpt.py, test_cpu_mode_is_tiny_and_skips_a_missing_campaign; growth cost:
    tests/benchmarks/test_growth_cost.py; the GPU tests' collection: test_the_smoke_runs_first_... here)."""
    proc = _run(tmp_path, timeout=400, MODE="cpu", STEPS="compile_scope", OMP_NUM_THREADS="1")
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    status = (out / "status.txt").read_text().splitlines()
    assert [line.split(" exit ")[0] for line in status] == ["preflight", "compile_scope"], status
    assert all(" exit 0 " in line for line in status), status
    result = json.loads((out / "compile_scope_cpu.json").read_text())
    if "--scopes" in (ROOT / "benchmarks" / "compile_cost.py").read_text():  # whole against per block
        assert {"base_first_s", "width_first_s", "depth_first_s"} <= set(result["table"]), result["table"]
    else:  # the whole-GPT compile around a growth (compile_cost.py before --scopes)
        assert result["after"]["compiled_ms"] > 0 and result["first_step_after_growth_s"] > 0
    import tarfile

    with tarfile.open(out / "all.tgz") as packed:
        assert {"status.txt", "env.txt", "compile_scope.log", "compile_scope_cpu.json"} <= set(packed.getnames())


def test_the_smoke_runs_first_and_reports_each_failure_by_its_first_error_line(tmp_path):
    """Issue 45: the throughput step's setup error was hidden inside a CalledProcessError. A smoke whose examples
    script fails the way a nested run fails (the child's RuntimeError, then the parent's CalledProcessError) puts the
    child's line into status.txt and smoke.md, before any other step. Before it, the preflight names the packages
    missing (2026-11-28: boto3, which litdata imports, found missing only by the throughput step) and goes on."""
    stub = tmp_path / "examples.py"
    stub.write_text("import sys\n"
                    "print('Traceback (most recent call last):')\n"
                    "print('RuntimeError: The current optimizer, AdamW, does not allow for gradient clipping')\n"
                    "print('subprocess.CalledProcessError: Command sparkling returned non-zero exit status 1.')\n"
                    "sys.exit(1)\n")
    packages = tmp_path / "packages"
    packages.mkdir()
    (packages / "needs_boto.py").write_text("import boto_not_here\n")  # as litdata imports boto3
    proc = _run(tmp_path, MODE="cpu", STEPS="smoke", DEADLINE="120", EXAMPLES_SCRIPT=str(stub),
                NEEDS="json needs_boto not_here_either", PYTHONPATH=f"{packages}:{os.environ.get('PYTHONPATH', '')}")
    assert proc.returncode == 0, proc.stderr
    status = (tmp_path / "out" / "status.txt").read_text().splitlines()
    assert status[0].startswith("preflight exit 1 ") and status[0].endswith(
        ": missing boto_not_here (imported by needs_boto), not_here_either: carry them as wheels in .whl/"), status
    assert status[1].startswith("smoke_examples exit 1 ")
    assert status[1].endswith(": RuntimeError: The current optimizer, AdamW, does not allow for gradient clipping")
    smoke = (tmp_path / "out" / "smoke.md").read_text()
    assert "FAIL" in smoke and "does not allow for gradient clipping" in smoke
    assert "| CLI GPU tests | pass |" in smoke  # collected only on the CPU


def test_the_examples_smoke_writes_its_table_row_by_row(tmp_path):
    """gpu_examples.py --tiny on one example (the CPU mode of the smoke): a pass row with its growth steps."""
    table, out = tmp_path / "smoke.md", tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_examples.py"), "--tiny", "--steps", "6",
                           "--examples", "joint_2x", "--compile", "auto", "--work", str(tmp_path / "work"),
                           "--out", str(out), "--table", str(table)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["rc"] == 0 and row["first_error"] is None and row["grew_at"] == row["planned_growth_steps"] == [3]
    assert "| joint_2x | pass | - | [3] ([3]) |" in table.read_text()


def test_the_examples_side_by_side_each_get_their_own_gpu_and_port(tmp_path, monkeypatch):
    """gpu_examples.py --jobs 4 on a faked 8-GPU node: the 4 examples at once, each on its own GPU (its ``devices``:
    1) with its own master port; the JSON says they ran alone. On one GPU the same 4 share it, and it says so."""
    import threading

    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_examples

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    names = ["dense_inner_2x", "hidden_2x", "joint_2x", "depth_2x"]
    for count, alone in ((8, True), (1, False)):
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        together, started = threading.Barrier(4, timeout=20), []

        def launch(argv, env, **kwargs):  # the stand-in for `sparkling pretrain`: records, waits for the other 3
            started.append({k: env.get(k) for k in ("CUDA_VISIBLE_DEVICES", "MASTER_PORT")})
            together.wait()
            return subprocess.CompletedProcess(argv, 0, "", "")

        monkeypatch.setattr(gpu_examples.subprocess, "run", launch)
        out = tmp_path / f"rows{count}.json"
        gpu_examples.main(["--examples", ",".join(names), "--jobs", "4", "--steps", "8", "--work",
                           str(tmp_path / f"work{count}"), "--out", str(out)])
        gpus = sorted(e["CUDA_VISIBLE_DEVICES"] for e in started)
        assert gpus == (["0", "1", "2", "3"] if alone else ["0"] * 4), gpus
        assert len({e["MASTER_PORT"] for e in started}) == 4
        result = json.loads(out.read_text())
        assert result["alone"] is alone and sorted(r["gpus"] for r in result["rows"]) == gpus
