"""``benchmarks/reproduce.py``, the harness behind every "does growth pay" figure in the README: the iso-FLOPs row
really gets the growth row's FLOPs, each axis grows what and when it says, identical configurations train once,
and the paired statistics are the per-seed differences (checked on hand-made run directories, no training)."""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def repro():
    spec = importlib.util.spec_from_file_location("reproduce_under_test", ROOT / "benchmarks" / "reproduce.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.mark.parametrize("axis", ["inner", "hidden", "joint", "two-stage", "joint-25", "joint-75"])
def test_iso_flops_row_gets_the_growth_rows_flops(repro, axis, tmp_path):
    """The from-scratch large row trains for the step count whose ``6 N D`` is nearest the growth row's FLOPs
    (recomputed here from the parameters per phase, not read from the harness' own total)."""
    size = repro.resolve_size("tiny")
    cells, refused = repro.plan_grid("tiny", size, [axis], ["SPARKLING", "scratch large (iso-FLOPs)"], [1],
                                     tmp_path)
    assert refused == []
    grown = next(c for c in cells if c["row"] == "SPARKLING")["compute"]
    iso = next(c for c in cells if c["row"] != "SPARKLING")["compute"]
    tps = grown["tokens_per_step"]
    by_hand = sum(6.0 * n * tps * k for n, k in zip(grown["active_params"], grown["phase_steps"]))
    assert grown["flops"] == pytest.approx(by_hand, rel=1e-12)
    per_step = 6.0 * iso["active_params"][-1] * tps
    assert iso["active_params"] == [grown["active_params"][-1]]  # the grown shape from the first step
    assert abs(iso["steps"] * per_step - by_hand) <= per_step / 2
    assert iso["steps"] < grown["steps"]


def test_axes_grow_what_and_when_they_say(repro):
    size = repro.resolve_size("quick")
    small, large, steps = size["small"], size["large"], 1000
    assert repro.axis_stages("inner", size, steps) == [
        {"at_step": 500, "intermediate_size": large["intermediate_size"], "rewarmup_steps": 50}]
    assert repro.axis_stages("hidden", size, steps)[0]["n_embd"] == large["n_embd"]
    assert [s["at_step"] for s in repro.axis_stages("joint-25", size, steps)] == [250]
    assert [s["at_step"] for s in repro.axis_stages("joint-75", size, steps)] == [750]
    two = repro.axis_stages("two-stage", size, steps)
    assert [s["at_step"] for s in two] == [333, 666]
    assert two[0]["n_embd"] == (small["n_embd"] + large["n_embd"]) // 2
    assert two[1]["intermediate_size"] == large["intermediate_size"]
    with pytest.raises(ValueError, match="unknown axis 'joint-50'"):
        repro.axis_stages("joint-50", size, steps)


def test_rows_pin_the_paper_recipe_and_identical_configs_train_once(repro, tmp_path):
    """Every growth row is its keys on top of the paper's recipe (the CLI's default would add the symmetry loop);
    "ablation: RMS only" is naive growth at 2x and "recommended recipe" is "symmetry target 0.5", so each pair
    points at one run directory."""
    size = repro.resolve_size("tiny")
    config = repro.build_config(size, "joint", repro.ROWS["SPARKLING"], seed=2)
    assert config["growth"]["recipe"] == "paper" and config["seed"] == 2 and config["growth"]["seed"] == 2
    assert repro.build_config(size, "joint", repro.ROWS["recommended recipe"], 1)["growth"]["recipe"] == "recommended"
    rows = ["naive growth", "ablation: RMS only", "SPARKLING", "symmetry target 0.5", "recommended recipe",
            "symmetry target 0.8", "random-zero", "wsd recipe"]
    cells, _ = repro.plan_grid("tiny", size, ["joint"], rows, [1, 2], tmp_path)
    dirs = {(c["row"], c["seed"]): c["run_dir"] for c in cells}
    assert dirs[("naive growth", 1)] == dirs[("ablation: RMS only", 1)]
    assert dirs[("symmetry target 0.5", 2)] == dirs[("recommended recipe", 2)] != dirs[("symmetry target 0.8", 2)]
    assert dirs[("random-zero", 2)] == dirs[("wsd recipe", 2)] != dirs[("SPARKLING", 2)]  # growth.recipe: wsd
    assert len(set(dirs.values())) == 2 * 5
    assert dirs[("naive growth", 1)] != dirs[("naive growth", 2)] != dirs[("SPARKLING", 2)]


def _fake_run(run_dir: Path, val_loss: float | None, status: str = "completed", curve: dict | None = None,
              symmetry: dict | None = None) -> None:
    from torch.utils.tensorboard import SummaryWriter

    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps({"status": status, "val_loss": val_loss,
                                                      "wall_clock_seconds": 60.0}))
    writer = SummaryWriter(str(run_dir / "logs"))
    for step, value in (curve or {}).items():
        writer.add_scalar("val_loss", value, step)
    for tag, value in (symmetry or {}).items():
        writer.add_scalar(tag, value, 10)
    writer.close()


def test_paired_differences_are_per_seed(repro, tmp_path):
    """Three seeds of SPARKLING and iso-FLOPs scratch, a row with one seed missing and one failed: the row's
    difference is paired by seed (mean, sample sd, t-interval, seeds where the row is worse), missing and failed
    seeds are named, and the curve's in-loop validation steps are shifted to the optimizer step that ran them."""
    losses = {"SPARKLING": [3.40, 3.50, 3.45], "scratch large (iso-FLOPs)": [3.30, 3.45, 3.47],
              "naive growth": [3.44, None, None]}  # seed 2 never ran, seed 3 failed
    compute = {"steps": 1000, "tokens_per_step": 10, "eval_interval": 250, "active_params": [100, 200],
               "phase_steps": [500, 500]}
    cells = []
    for row, values in losses.items():
        for seed, loss in enumerate(values, start=1):
            run_dir = tmp_path / repro.slug(row) / f"seed{seed}"
            cells.append({"axis": "joint", "row": row, "seed": seed, "run_dir": str(run_dir), "compute": compute,
                          "note": ""})
            if row == "naive growth" and seed == 2:
                continue  # never ran
            _fake_run(run_dir, loss, status="failed" if loss is None else "completed",
                      curve={249: 4.0, 999: loss or 9.0, 1000: loss or 9.0},
                      symmetry={"symmetry/stage_0/n_embd": 0.5 + seed / 10})
    table = repro.collect(cells)["joint"]

    ref = losses["SPARKLING"]
    iso = losses["scratch large (iso-FLOPs)"]
    diffs = [i - r for i, r in zip(iso, ref)]
    entry = table["scratch large (iso-FLOPs)"]
    assert entry["diff"]["per_seed"] == pytest.approx(diffs)
    assert entry["diff"]["mean"] == pytest.approx(statistics.fmean(diffs))
    assert entry["diff"]["sd"] == pytest.approx(statistics.stdev(diffs))
    assert entry["diff"]["ci95"] == pytest.approx(4.303 * statistics.stdev(diffs) / math.sqrt(3))
    assert entry["diff"]["wins"] == sum(d > 0 for d in diffs) == 1
    assert table["SPARKLING"]["diff_iso_flops"]["per_seed"] == pytest.approx([-d for d in diffs])
    assert "diff" not in table["SPARKLING"]  # no difference of a row to itself
    assert table["SPARKLING"]["mean"] == pytest.approx(statistics.fmean(ref))

    naive = table["naive growth"]
    assert naive["seeds"] == {1: 3.44} and naive["not_run"] == [2] and naive["failed"] == [3]
    assert naive["diff"]["n"] == 1 and naive["diff"]["sd"] is None
    assert naive["symmetry_end"] == {"n_embd": pytest.approx(0.6)}
    assert table["SPARKLING"]["symmetry_end"] == {"n_embd": pytest.approx(0.7)}

    curve = table["SPARKLING"]["curves"][1]
    assert [p["step"] for p in curve] == [250, 1000]  # 249 -> 250; 999 -> 1000, overwritten by the final value
    assert curve[0]["flops"] == pytest.approx(6 * 100 * 10 * 250)
    assert curve[1]["flops"] == pytest.approx(6 * 10 * (100 * 500 + 200 * 500))
    assert curve[1]["val_loss"] == pytest.approx(ref[0])


def test_dry_run_lists_the_cells_and_trains_nothing(repro, tmp_path, capsys):
    out = tmp_path / "runs"
    assert repro.main(["--size", "tiny", "--axes", "joint-75", "--rows", "SPARKLING", "--seeds", "2", "--dry-run",
                       "--out", str(out), "--results", str(tmp_path / "results")]) == 0
    text = capsys.readouterr().out
    assert "joint-75 | SPARKLING" in text and "seed 2: 40 steps" in text
    assert not out.exists()
    with pytest.raises(SystemExit):
        repro.main(["--size", "tiny", "--axes", "sideways", "--dry-run", "--out", str(out)])
    assert "unknown axes ['sideways']" in capsys.readouterr().err


def test_generated_configs_are_valid_sparkling_configs(repro, tmp_path):
    """What the harness writes is what ``sparkling pretrain --config`` reads (the package parses it)."""
    size = repro.resolve_size("tiny")
    config = repro.build_config(size, "two-stage", repro.ROWS["recommended recipe"], seed=1)
    compute, why = repro.check_config(config)
    assert why is None, why
    assert compute["growth_steps"] == [13, 26] and len(compute["active_params"]) == 3
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    assert yaml.safe_load(path.read_text())["growth"]["stages"][1]["at_step"] == 26


# ---------------------------------------------------------------------------------------------- depth (issue 21)
def test_depth_axes_grow_layers_when_they_say(repro):
    """``depth`` doubles n_layer at the size's widths at 25% (``depth-5`` / ``depth-50``: 5% / 50%);
    ``depth+width`` doubles n_layer and the joint width in one stage at 25%."""
    size = repro.resolve_size("quick")
    small, large, steps = size["small"], size["large"], 1000
    assert repro.axis_stages("depth", size, steps) == [{"at_step": 250, "n_layer": 8, "rewarmup_steps": 50}]
    assert [s["at_step"] for s in repro.axis_stages("depth-5", size, steps)] == [50]
    assert [s["at_step"] for s in repro.axis_stages("depth-50", size, steps)] == [500]
    assert repro.axis_stages("depth+width", size, steps) == [
        {"at_step": 250, "n_layer": 2 * small["n_layer"], "n_embd": large["n_embd"],
         "intermediate_size": large["intermediate_size"], "rewarmup_steps": 50}]
    # the grown shape the scratch rows train: 8 layers at the small widths, or 8 layers at 2x width
    assert repro.large_model("depth", size) == {"n_layer": 8}
    assert repro.large_model("depth+width", size) == {**large, "n_layer": 8}
    assert "n_layer" not in repro.large_model("joint", size)
    config = repro.build_config(size, "depth", repro.ROWS["scratch large (iso-token)"], seed=1)
    assert config["model_config"]["n_layer"] == 8 and config["model_config"]["n_embd"] == small["n_embd"]
    row = repro.build_config(size, "depth", repro.ROWS["depth interleave random-zero"], seed=1)
    assert row["growth"]["stages"] == [{"at_step": 250, "n_layer": 8, "rewarmup_steps": 50,
                                        "depth_order": "interleave", "depth_init": "random-zero"}]
    assert row["model_config"]["n_layer"] == small["n_layer"]


def test_depth_rows_apply_to_depth_axes_only(repro):
    rows = ["scratch small", "SPARKLING", "recommended recipe", "depth stack copy", "scratch large (iso-FLOPs)"]
    assert repro.axis_rows("depth", rows) == ["scratch small", "depth stack copy", "scratch large (iso-FLOPs)"]
    assert repro.axis_rows("joint", rows) == ["scratch small", "SPARKLING", "recommended recipe",
                                              "scratch large (iso-FLOPs)"]
    assert repro.reference("depth-50") == "depth stack copy-zero" and repro.reference("joint") == "SPARKLING"
    assert repro.ROWS["depth stack copy-zero recommended"]["set"] == {"growth.recipe": "recommended"}


@pytest.mark.parametrize("axis", ["depth", "depth-5", "depth-50", "depth+width"])
def test_depth_iso_flops_by_hand(repro, axis, tmp_path):
    """The iso-FLOPs scratch row of a depth axis trains the grown shape (8 layers; 2x width too on depth+width)
    from the first step, for the steps whose ``6 N D`` is nearest the depth row's FLOPs; the parameter counts and
    the FLOPs are recomputed here from the litgpt shapes, not read from the package."""
    size = repro.resolve_size("quick")
    cells, refused = repro.plan_grid("quick", size, [axis], ["depth stack copy-zero", "scratch large (iso-FLOPs)"],
                                     [1], tmp_path)
    assert refused == []
    grown = next(c for c in cells if c["row"] == "depth stack copy-zero")["compute"]
    iso = next(c for c in cells if c["row"] == "scratch large (iso-FLOPs)")
    small = size["small"]
    vocab = size["config"]["data"]["vocab_size"]

    def params(n_layer, n_embd, mlp):  # LLaMA block without biases: qkv + proj, 3 MLP linears, 2 RMSNorms
        qkv = n_embd * (small["n_head"] + 2 * small["n_query_groups"]) * small["head_size"]
        proj = small["n_head"] * small["head_size"] * n_embd
        block = qkv + proj + 3 * n_embd * mlp + 2 * n_embd
        return 2 * vocab * n_embd + n_layer * block + n_embd  # embedding, untied head, blocks, final norm

    wide = axis == "depth+width"
    n_embd = size["large"]["n_embd"] if wide else small["n_embd"]
    mlp = size["large"]["intermediate_size"] if wide else small["intermediate_size"]
    before, after = params(4, small["n_embd"], small["intermediate_size"]), params(8, n_embd, mlp)
    at = repro.axis_stages(axis, size, 1000)[0]["at_step"]
    tps = 8 * 128
    assert grown["total_params"] == [before, after] and grown["phase_steps"] == [at, 1000 - at]
    by_hand = 6.0 * tps * (before * at + after * (1000 - at))
    assert grown["flops"] == pytest.approx(by_hand, rel=1e-12)
    assert iso["config"]["model_config"]["n_layer"] == 8 and iso["config"]["model_config"]["n_embd"] == n_embd
    assert iso["compute"]["total_params"] == [after]
    assert iso["compute"]["steps"] == round(by_hand / (6.0 * after * tps))
    if axis == "depth":
        assert (before, after, iso["compute"]["steps"]) == (131360, 197152, 917)


def test_width_run_identity_ignores_unset_depth_keys(repro):
    """A width stage hashes without the depth keys (and unset heads keys), as before depth growth existed, so the
    finished width runs keep their identity; ``middle`` at 4 -> 8 places the copies like ``interleave``, so the
    two rows train once."""
    from lightning_sparkling import GrowthStage

    width = repro.stage_identity(GrowthStage(500, n_embd=64, intermediate_size=256).to_dict(), 4)
    assert not {"n_layer", "depth_init", "depth_order", "n_head", "n_query_groups", "model_name",
                "model_config", "recipe"} & set(width)  # recipe: a label, the keys it filled in are the run
    depth = repro.stage_identity(GrowthStage(250, n_layer=8, depth_order="middle").to_dict(), 4)
    assert depth["n_layer"] == 8 and depth["depth_order"] == "interleave" and depth["depth_init"] == "copy-zero"
    assert repro.stage_identity(GrowthStage(250, n_layer=6, depth_order="middle").to_dict(), 4)["depth_order"] \
        == "middle"  # 4 -> 6: the two extra copies sit differently
    size = repro.resolve_size("tiny")
    cells, _ = repro.plan_grid("tiny", size, ["depth"], ["depth interleave copy-zero", "depth middle copy-zero",
                                                          "depth stack copy-zero"], [1], Path("/tmp/unused"))
    dirs = {c["row"]: c["run_dir"] for c in cells}
    assert dirs["depth middle copy-zero"] == dirs["depth interleave copy-zero"] != dirs["depth stack copy-zero"]


# ---------------------------------------------------------------------------------------------- heads (issue 22)
def test_hidden_heads_axis_grows_heads_with_the_hidden_size(repro):
    """``hidden+heads`` is the ``hidden`` axis' stage (n_embd 2x at half the run) with ``n_head`` and
    ``n_query_groups`` 2x as well at the same ``head_size``; its scratch rows train that shape (4 heads of 16 =
    n_embd 64), while ``hidden``'s keep 2 heads."""
    size = repro.resolve_size("quick")
    small = size["small"]
    hidden = repro.axis_stages("hidden", size, 1000)
    heads = repro.axis_stages("hidden+heads", size, 1000)
    assert heads == [{**hidden[0], "n_head": 2 * small["n_head"], "n_query_groups": 2 * small["n_query_groups"]}]
    assert heads == [{"at_step": 500, "n_embd": 64, "n_head": 4, "n_query_groups": 4, "rewarmup_steps": 50}]
    assert repro.large_model("hidden+heads", size) == {"n_embd": 64, "n_head": 4, "n_query_groups": 4}
    assert repro.large_model("hidden", size) == {"n_embd": 64}
    for row in ("scratch large (iso-token)", "scratch large (iso-FLOPs)"):
        model = repro.build_config(size, "hidden+heads", repro.ROWS[row], seed=1)["model_config"]
        assert (model["n_head"], model["n_query_groups"], model["head_size"]) == (4, 4, small["head_size"])
        assert model["n_head"] * model["head_size"] == model["n_embd"] == 64
        assert repro.build_config(size, "hidden", repro.ROWS[row], seed=1)["model_config"]["n_head"] == 2
    grown = repro.build_config(size, "hidden+heads", repro.ROWS["SPARKLING"], seed=1)
    assert grown["model_config"]["n_head"] == 2 and grown["growth"]["stages"] == heads
    assert repro.axis_rows("hidden+heads", ["SPARKLING", "depth stack copy", "scratch small"]) == [
        "SPARKLING", "scratch small"]
    assert repro.reference("hidden+heads") == "SPARKLING"
    # GQA keeps its heads per group, MQA its one group; the size's large n_head overrides
    gqa = {**size, "small": {**small, "n_head": 4, "n_query_groups": 2}}
    assert repro.heads_target(gqa) == {"n_head": 8, "n_query_groups": 4}
    assert repro.heads_target({**size, "small": {**small, "n_query_groups": 1}}) == {"n_head": 4, "n_query_groups": 1}
    assert repro.heads_target({**size, "large": {**size["large"], "n_head": 8}}) == {"n_head": 8, "n_query_groups": 8}
    assert "n_head" not in repro.large_model("joint", {**size, "large": {**size["large"], "n_head": 8}})


def test_hidden_heads_iso_flops_by_hand_and_identity(repro, tmp_path):
    """The iso-FLOPs scratch row of ``hidden+heads`` trains the 4-head grown shape for the steps whose ``6 N D``
    is nearest the growth row's FLOPs (parameters recomputed here from the litgpt shapes); the heads keys enter the
    run identity, so no ``hidden+heads`` run shares a directory with a ``hidden`` run, while the ``hidden`` runs
    keep the identity they had before heads growth existed."""
    size = repro.resolve_size("quick")
    rows = ["SPARKLING", "scratch large (iso-FLOPs)"]
    cells, refused = repro.plan_grid("quick", size, ["hidden", "hidden+heads"], rows, [1, 2], tmp_path)
    assert refused == []
    by = {(c["axis"], c["row"], c["seed"]): c for c in cells}
    vocab, hs = size["config"]["data"]["vocab_size"], size["small"]["head_size"]
    mlp = size["small"]["intermediate_size"]

    def params(n_embd, n_head, groups):  # 4 LLaMA blocks without biases, untied embedding and head, final norm
        block = n_embd * (n_head + 2 * groups) * hs + n_head * hs * n_embd + 3 * n_embd * mlp + 2 * n_embd
        return 2 * vocab * n_embd + 4 * block + n_embd

    before, after = params(32, 2, 2), params(64, 4, 4)
    assert (before, after, params(64, 2, 2)) == (131360, 295488, 262720)
    grown = by[("hidden+heads", "SPARKLING", 1)]["compute"]
    tps = 8 * 128
    assert grown["total_params"] == [before, after] and grown["phase_steps"] == [500, 500]
    by_hand = 6.0 * tps * (before * 500 + after * 500)
    assert grown["flops"] == pytest.approx(by_hand, rel=1e-12)
    iso = by[("hidden+heads", "scratch large (iso-FLOPs)", 1)]
    assert iso["compute"]["total_params"] == [after]
    assert iso["compute"]["steps"] == round(by_hand / (6.0 * after * tps)) == 722
    assert by[("hidden", "scratch large (iso-FLOPs)", 1)]["compute"]["steps"] == 750

    dirs = {k: c["run_dir"] for k, c in by.items()}
    assert len(set(dirs.values())) == len(dirs) == 8  # every (axis, row, seed) its own run
    assert dirs[("hidden+heads", "SPARKLING", 1)].endswith("quick/hidden+heads/sparkling/seed1")
    from lightning_sparkling import GrowthStage

    heads_stage = repro.stage_identity(GrowthStage(500, n_embd=64, n_head=4, n_query_groups=4).to_dict(), 4)
    hidden_stage = repro.stage_identity(GrowthStage(500, n_embd=64).to_dict(), 4)
    assert (heads_stage["n_head"], heads_stage["n_query_groups"]) == (4, 4)
    assert not {"n_head", "n_query_groups"} & set(hidden_stage)
    assert {k: v for k, v in heads_stage.items() if k not in ("n_head", "n_query_groups")} == hidden_stage
    again, _ = repro.plan_grid("quick", size, ["hidden+heads"], rows, [1], tmp_path)
    assert {c["hash"] for c in again} == {by[("hidden+heads", r, 1)]["hash"] for r in rows}  # stable identity


def test_tag_names_the_outputs_and_paths_are_repo_relative(repro, tmp_path):
    """``--tag`` writes ``reproduce_<size>_<tag>.{json,md,png}`` (one PNG of every axis); a path inside the
    repository is recorded relative to it, one outside as it is."""
    results = tmp_path / "results"
    assert repro.main(["--size", "tiny", "--axes", "hidden,hidden+heads", "--rows", "SPARKLING", "--seeds", "1",
                       "--report-only", "--tag", "heads", "--out", str(tmp_path / "runs"),
                       "--results", str(results)]) == 0
    assert sorted(p.name for p in results.iterdir()) == [
        "reproduce_tiny_heads.json", "reproduce_tiny_heads.md", "reproduce_tiny_heads.png"]
    payload = json.loads((results / "reproduce_tiny_heads.json").read_text())
    assert payload["pngs"] == [str(results / "reproduce_tiny_heads.png")]
    assert list(payload["table"]) == ["hidden", "hidden+heads"]
    assert repro.published_path(ROOT / "benchmarks" / "results" / "x.png") == "benchmarks/results/x.png"
    assert repro.published_path("/tmp/elsewhere/x.png") == "/tmp/elsewhere/x.png"


# ------------------------------------------------------------------------------------------------ the scan (issue 23)
def test_scan_cells_cover_ratios_schedules_and_timings(repro):
    """One cell per ratio, schedule and timing; joint timings with the recommended recipe, depth timings with stack
    copy-zero; the ratio multiplies train.max_steps and the growth step with it."""
    size = repro.resolve_size("quick")
    cells, skipped = repro.scan_cells(size, [1, 4], ["cosine", "wsd"], repro.SCAN_DEFAULT_AXES)
    assert skipped == [] and len(cells) == 2 * 2 * 6  # growth at 75% is inside the default stable phase (0.8)
    keys = [(c["ratio"], c["schedule"], c["axis"]) for c in cells]
    assert len(set(keys)) == len(keys)
    rows = {c["axis"]: c["row"] for c in cells}
    assert rows == {"joint-25": "recommended recipe", "joint": "recommended recipe", "joint-75": "recommended recipe",
                    "depth-5": "depth stack copy-zero", "depth": "depth stack copy-zero",
                    "depth-50": "depth stack copy-zero"}
    at = {(c["ratio"], c["axis"]): (c["steps"], c["growth_step"], c["growth_at"]) for c in cells}
    assert at[(1, "joint")] == (1000, 500, 0.5) and at[(4, "joint-25")] == (4000, 1000, 0.25)
    assert at[(4, "depth-5")] == (4000, 200, 0.05) and at[(1, "depth-50")] == (1000, 500, 0.5)
    assert {c["sub"] for c in cells} == {"x1-cosine", "x1-wsd", "x4-cosine", "x4-wsd"}
    # other rows replace the defaults on the axes they apply to
    cells, skipped = repro.scan_cells(size, [1], ["cosine"], ["joint", "depth"], ["SPARKLING", "recommended recipe"])
    assert [(c["axis"], c["row"]) for c in cells] == [("joint", "SPARKLING"), ("joint", "recommended recipe")]
    assert skipped[0]["axis"] == "depth" and "grows on this axis" in skipped[0]["why"]
    cells, skipped = repro.scan_cells(size, [1], ["wsd"], ["joint-25", "joint", "depth"],
                                      ["recommended recipe", "joint:SPARKLING", "depth stack copy-zero"])
    assert [(c["axis"], c["row"]) for c in cells] == [
        ("joint-25", "recommended recipe"), ("joint", "recommended recipe"), ("joint", "SPARKLING"),
        ("depth", "depth stack copy-zero")] and skipped == []
    assert (repro.map_axis("joint-25"), repro.map_axis("depth-50"), repro.map_axis("hidden+heads")) == (
        "joint", "depth", "hidden+heads")
    # the map's recipe is a growth.recipe: the row "random-zero" (paper's 1.3x re-warmup) is the recipe wsd, not
    # the recipe random-zero (10x, the row "random-zero + ratio 10"); a row that is no recipe is not exported
    assert [repro.map_recipe(r) for r in ("recommended recipe", "SPARKLING", "depth stack copy-zero",
                                          "random-zero + ratio 10", "random-zero", "naive growth")] == [
        "recommended", "paper", "paper", "random-zero", "wsd", None]
    from lightning_sparkling import GrowthStage
    from lightning_sparkling.growth.stage import RECIPES

    assert repro.ROWS["random-zero + ratio 10"]["stage"] == RECIPES["random-zero"]
    row = GrowthStage(5, n_embd=64, **repro.ROWS["random-zero"]["stage"], recipe="paper").to_dict()
    wsd = GrowthStage.from_recipe("wsd", 5, n_embd=64).to_dict()
    # the same values; _filled differs: the row sets init and rewarmup_ratio, the recipe wsd fills them
    assert {**row, "_filled": None} == {**wsd, "recipe": "paper", "_filled": None}


def test_scan_puts_wsd_on_every_run_of_a_cell_scratch_included(repro, tmp_path):
    """Under wsd the growth row and its iso-FLOPs scratch both run train.lr_schedule: wsd (the comparison is to
    scratch on the same schedule); cosine cells are the grid's own configurations; each cell in its own folder."""
    size = repro.resolve_size("tiny")
    cells, _ = repro.scan_cells(size, [1, 2], ["cosine", "wsd"], ["joint", "depth"])
    runs, refused = repro.plan_scan("tiny", size, cells, [1], tmp_path)
    assert refused == []
    assert len(runs) == 2 * 2 * 2 * 2  # ratios x schedules x axes x (growth row, scratch)
    for run in runs:
        train = run["config"]["train"]
        assert train.get("lr_schedule") == ("wsd" if run["sub"].endswith("wsd") else None), run["run_dir"]
        assert train["max_steps"] == (40 if run["row"] != repro.ISO_FLOPS else run["compute"]["steps"]) * \
            (1 if run["row"] == repro.ISO_FLOPS else int(run["sub"][1]))
        assert Path(run["run_dir"]).relative_to(tmp_path / run["sub"] / "tiny" / run["axis"])
    scratch = [r for r in runs if r["row"] == repro.ISO_FLOPS]
    assert len(scratch) == 8 and all(r["compute"]["active_params"] == [r["compute"]["active_params"][-1]]
                                     for r in scratch)
    grid, _ = repro.plan_grid("tiny", size, ["joint"], ["recommended recipe", repro.ISO_FLOPS], [1], tmp_path)
    cosine = {r["row"]: r["config"] for r in runs if r["sub"] == "x1-cosine" and r["axis"] == "joint"}
    assert cosine == {c["row"]: c["config"] for c in grid}  # same FLOPs, same scratch steps, same keys
    wsd = {r["row"]: r["compute"]["steps"] for r in runs if r["sub"] == "x1-wsd" and r["axis"] == "joint"}
    assert wsd == {c["row"]: c["compute"]["steps"] for c in grid}


def test_scan_skips_growth_inside_the_wsd_decay_and_the_package_agrees(repro, tmp_path, capsys):
    size = repro.resolve_size("tiny")
    size["config"]["train"]["lr_decay_fraction"] = 0.3  # stable phase: the first 70% of the run
    cells, skipped = repro.scan_cells(size, [1], ["cosine", "wsd"], ["joint-25", "joint-75", "depth-50"])
    assert [(c["schedule"], c["axis"]) for c in cells] == [
        ("cosine", "joint-25"), ("cosine", "joint-75"), ("cosine", "depth-50"), ("wsd", "joint-25"),
        ("wsd", "depth-50")]
    assert [(s["schedule"], s["axis"]) for s in skipped] == [("wsd", "joint-75")]
    assert "not before the WSD decay" in skipped[0]["why"]
    # the package refuses that run too: the scan only leaves out what could not train
    config = repro.build_config(repro.scan_size(size, 1, "wsd"), "joint-75", repro.ROWS["recommended recipe"], 1)
    assert repro.check_config(config)[0] is None
    # through the CLI (--set reaches the decay fraction): the dry run lists the cells and run counts, trains nothing
    out = tmp_path / "runs"
    assert repro.main(["--size", "tiny", "--seeds", "1", "--scan", "--scan-ratios", "1", "--scan-schedules", "wsd",
                       "--scan-axes",
                       "joint-75,joint", "--set", "train.lr_decay_fraction=0.3", "--dry-run", "--out", str(out),
                       "--results", str(tmp_path / "results")]) == 0
    text = capsys.readouterr().out
    assert "1 cells, 2 distinct runs (0 already done, 2 to train)" in text
    assert "skipped: x1 wsd joint-75" in text and "| wsd    | joint    | recommended recipe vs" in text
    assert not out.exists()
    with pytest.raises(SystemExit):
        repro.main(["--size", "tiny", "--scan", "--set", "train.lr_schedule=wsd", "--dry-run", "--out", str(out)])
    assert "not with --set" in capsys.readouterr().err


def test_scan_table_and_export_load_as_measured_cells(repro, tmp_path):
    """Hand-made finished runs of two cells: one line per cell with the paired Δ against its own scratch, and the
    export (--scan-export) is a JSON list of measured.json cells, written as the map writes them."""
    from lightning_sparkling.pretrain.advice.measured import MAP_PATH, MeasuredCell

    size = repro.resolve_size("tiny")
    out, results, export = tmp_path / "runs", tmp_path / "results", tmp_path / "cells.json"
    cells, _ = repro.scan_cells(size, [1], ["wsd"], ["joint", "depth"])
    runs, _ = repro.plan_scan("tiny", size, cells, [1, 2, 3], out)
    losses = {("joint", "recommended recipe"): [3.40, 3.50, 3.45], ("joint", repro.ISO_FLOPS): [3.45, 3.48, 3.50],
              ("depth", "depth stack copy-zero"): [3.60, 3.70, 3.65], ("depth", repro.ISO_FLOPS): [3.50, 3.72, 3.60]}
    for run in runs:
        _fake_run(Path(run["run_dir"]), losses[(run["axis"], run["row"])][run["seed"] - 1])
        (Path(run["run_dir"]) / "config.yaml").write_text(yaml.safe_dump({**run["config"],
                                                                          "out_dir": run["run_dir"]}))
    assert repro.main(["--size", "tiny", "--scan", "--scan-ratios", "1", "--scan-schedules", "wsd", "--scan-axes",
                       "joint,depth", "--out", str(out), "--results", str(results), "--scan-export", str(export),
                       "--tag", "wsd"]) == 0  # every run finished: nothing trains
    payload = json.loads((results / "reproduce_tiny_scan_wsd.json").read_text())
    lines = {ln["axis"]: ln for ln in payload["lines"]}
    joint = [a - b for a, b in zip(losses[("joint", "recommended recipe")], losses[("joint", repro.ISO_FLOPS)])]
    assert lines["joint"]["delta"] == pytest.approx(statistics.fmean(joint))
    assert lines["joint"]["sd"] == pytest.approx(statistics.stdev(joint))
    assert (lines["joint"]["seeds"], lines["joint"]["seeds_above"]) == (3, 1)
    assert (lines["depth"]["seeds"], lines["depth"]["seeds_above"]) == (3, 2)
    grown = next(r for r in runs if r["axis"] == "joint" and r["row"] != repro.ISO_FLOPS)["compute"]
    assert lines["joint"]["tokens_per_param"] == pytest.approx(40 * grown["tokens_per_step"]
                                                               / grown["active_params"][-1])
    assert repro.export_cells([{**lines["joint"], "recipe": None}], "tiny") == []  # a row that is no recipe
    exported = json.loads(export.read_text())
    assert exported == payload["measured_cells"] and len(exported) == 2
    measured = [MeasuredCell.from_json(cell) for cell in exported]  # the file's "axis" is the map category
    assert {(m.category, m.recipe, m.schedule, m.growth_at) for m in measured} == {
        ("joint", "recommended", "wsd", 0.5), ("depth", "paper", "wsd", 0.25)}
    joint_cell = next(m for m in measured if m.category == "joint")
    assert (joint_cell.delta, joint_cell.sd) == (round(statistics.fmean(joint), 3), round(statistics.stdev(joint), 3))
    assert joint_cell.where == "Where growth pays: the scan (tiny)"
    # every exported cell knows its size (issue 38): the grown shape's parameters, as the package counts them
    grown_params = {ln["axis"]: next(r for r in runs if r["axis"] == ln["axis"] and r["row"] == repro.ISO_FLOPS)
                    ["compute"]["total_params"][-1] for ln in lines.values()}
    assert {m.category: m.params for m in measured} == grown_params
    assert all(m.device == "cpu" and m.precision == "32-true" and m.corpus == "stdlib" and 0 < m.embedding_share < 1
               for m in measured)
    assert f"{joint_cell.delta:+.3f} ± {joint_cell.sd:.3f}" in (results / "reproduce_tiny_scan_wsd.md").read_text()
    # the map's own lines come out of format_cell unchanged: the export pastes into measured.json as it is
    for line in MAP_PATH.read_text(encoding="utf-8").splitlines():
        if line.strip().startswith('{"axis"'):
            text = line.strip().rstrip(",")
            assert repro.format_cell(json.loads(text)) == text


def test_scratch_flops_at_interpolates_in_log_flops_and_never_extrapolates(repro):
    points = [(1e12, 3.6), (2e12, 3.4), (4e12, 3.3)]
    flops, why = repro.scratch_flops_at(points, 3.5)  # halfway between 1e12 and 2e12 in loss: sqrt(2)e12 in log
    assert why == "" and flops == pytest.approx(math.sqrt(2) * 1e12)
    assert repro.scratch_flops_at(points, 3.3) == (pytest.approx(4e12), "")
    assert repro.scratch_flops_at(points, 3.25) == (None, "above")  # below every budget's loss: more than the largest
    assert repro.scratch_flops_at(points, 3.7) == (None, "below")  # the smallest budget already ends below it
    # a non-monotone curve: the first crossing from the smallest budget up counts
    flops, _ = repro.scratch_flops_at([(1e12, 3.6), (2e12, 3.4), (3e12, 3.45), (4e12, 3.3)], 3.42)
    assert 1e12 < flops < 2e12


def test_first_reach_fraction_is_linear_between_evaluations(repro):
    curve = [{"flops": 10.0, "val_loss": 4.0}, {"flops": 20.0, "val_loss": 3.0}, {"flops": 40.0, "val_loss": 2.5}]
    assert repro.first_reach_fraction(curve, 3.5, 40.0) == pytest.approx(15.0 / 40.0)
    assert repro.first_reach_fraction(curve, 4.5, 40.0) == pytest.approx(10.0 / 40.0)  # reached at the first eval
    assert repro.first_reach_fraction(curve, 2.0, 40.0) is None


def test_scan_budgets_give_the_speedup_at_equal_loss_per_seed(repro, tmp_path):
    """--budgets: the grown shape from scratch at 0.5x and 2x the iso-FLOPs scratch's steps besides it; the speed-up
    per seed is the scratch compute that reaches the growth run's final loss (log-FLOPs interpolation, recomputed
    here from the runs' own FLOPs) over the growth run's; a seed past the largest budget is censored ('> ...x') and
    keeps the mean out; the export carries speedup / speedup_sd only when every seed was interpolated."""
    size = repro.resolve_size("tiny")
    out, results = tmp_path / "runs", tmp_path / "results"
    cells, _ = repro.scan_cells(size, [1], ["cosine"], ["joint"])
    runs, refused = repro.plan_scan("tiny", size, cells, [1, 2], out, (0.5, 2.0))
    assert refused == []
    by_row = {}
    for run in runs:
        by_row.setdefault(run["row"], {})[run["seed"]] = run
    iso = by_row[repro.ISO_FLOPS][1]["compute"]["steps"]
    assert by_row[repro.budget_row(0.5)][1]["compute"]["steps"] == round(0.5 * iso)
    assert by_row[repro.budget_row(2.0)][2]["compute"]["steps"] == round(2.0 * iso)
    losses = {"recommended recipe": [3.45, 3.30], repro.ISO_FLOPS: [3.50, 3.50],
              repro.budget_row(0.5): [3.70, 3.70], repro.budget_row(2.0): [3.40, 3.40]}
    for run in runs:
        loss = losses[run["row"]][run["seed"] - 1]
        steps = run["compute"]["steps"]
        _fake_run(Path(run["run_dir"]), loss, curve={steps // 2 - 1: loss + 0.2, steps: loss})
        (Path(run["run_dir"]) / "config.yaml").write_text(yaml.safe_dump({**run["config"], "out_dir": run["run_dir"]}))
    # the two faked seeds only: a third would train for real (four tiny runs, ~20 s of the suite)
    assert repro.main(["--size", "tiny", "--scan", "--scan-ratios", "1", "--scan-schedules", "cosine", "--scan-axes",
                       "joint", "--budgets", "0.5,2", "--seeds", "2", "--out", str(out), "--results",
                       str(results)]) == 0
    line = json.loads((results / "reproduce_tiny_scan.json").read_text())["lines"][0]
    g = by_row["recommended recipe"][1]["compute"]["flops"]
    f_iso, f_hi = by_row[repro.ISO_FLOPS][1]["compute"]["flops"], by_row[repro.budget_row(2.0)][1]["compute"]["flops"]
    t = (3.50 - 3.45) / (3.50 - 3.40)
    expected = math.exp(math.log(f_iso) + t * (math.log(f_hi) - math.log(f_iso))) / g
    assert line["speedup_per_seed"]["1"] == f"{expected:.2f}x"
    assert line["speedup_per_seed"]["2"].startswith("> ")  # 3.30 is below every scratch budget's loss
    assert "speedup" not in line  # a censored seed keeps the mean out
    # seed 1 reaches scratch's final loss (3.50) between its two evaluations: 3.65 at half the run, 3.45 at its end
    frac = line["reach_fraction_per_seed"]["1"]
    steps = by_row["recommended recipe"][1]["compute"]["steps"]
    compute = by_row["recommended recipe"][1]["compute"]
    half, end = repro.cumulative_flops(compute, steps // 2), compute["flops"]
    assert frac == pytest.approx((half + (3.65 - 3.50) / (3.65 - 3.45) * (end - half)) / end)
    # every seed interpolated: the mean and sd go into the map's cell
    line2 = {**line, "speedup": 1.2, "speedup_sd": 0.1, "seeds": 2, "sd": 0.01, "delta": -0.1, "seeds_above": 0}
    cell = repro.export_cells([line2], "tiny")[0]
    assert (cell["speedup"], cell["speedup_sd"]) == (1.2, 0.1)
    assert json.loads(repro.format_cell(cell)) == cell


def test_4x_depth_axes_grow_2_to_8_layers_early_and_late(repro):
    """The operating points of the large published depth savings: 2 -> 8 layers in one stage at 5% (G_stack's factor
    4) and at 80% (late, shallow start); their scratch rows train the 8-layer shape; a WSD cell of the late one runs
    only with a decay shorter than 20% (its growth must fall in the stable phase)."""
    size = repro.resolve_size("quick")
    assert repro.axis_stages("depth-4x-5", size, 1000) == [{"at_step": 50, "n_layer": 8, "rewarmup_steps": 50}]
    assert repro.axis_stages("late-shallow", size, 1000)[0]["at_step"] == 800
    assert repro.large_model("late-shallow", size) == {"n_layer": 8}
    assert repro.build_config(size, "depth-4x-5", repro.ROWS["scratch small"], 1)["model_config"]["n_layer"] == 2
    assert repro.build_config(size, "depth-4x-5", repro.ROWS[repro.ISO_FLOPS], 1)["model_config"]["n_layer"] == 8
    _, skipped = repro.scan_cells(size, [1], ["wsd"], ["late-shallow"])
    assert skipped and "not before the WSD decay" in skipped[0]["why"]
    short = repro.merge(size, {"config": {"train": {"lr_decay_fraction": 0.1}}})
    cells, skipped = repro.scan_cells(short, [1], ["wsd"], ["late-shallow"])
    assert skipped == [] and cells[0]["growth_at"] == 0.8
    assert repro.map_recipe("random-zero + ratio 3") == "random-zero-3x"
    assert repro.map_axis("late-shallow") == repro.map_axis("depth-4x-5") == "depth"  # as the package classifies


# ------------------------------------------------------------------------------------------------------------ experts
def _moe_active_by_hand(run_config: dict) -> tuple[int, int]:
    """``(active, total)`` parameters of the litgpt GPT of a run's ``model_config`` (its data's vocabulary): every
    parameter, less the routed experts a token skips (``n_expert - n_expert_per_token`` per MoE block), counted from
    the modules here."""
    import torch
    from litgpt import GPT, Config

    config = run_config["model_config"]
    vocab = run_config["data"]["vocab_size"]
    with torch.device("meta"):
        model = GPT(Config(**{k: v for k, v in config.items() if k != "name"}, vocab_size=vocab,
                           padded_vocab_size=vocab))
    total = sum(p.numel() for p in model.parameters())
    skipped = 0
    for block in model.transformer.h:
        experts = getattr(block.mlp, "experts", None)
        if experts is not None:
            per_expert = sum(p.numel() for p in experts[0].parameters())
            skipped += per_expert * (len(experts) - config["n_expert_per_token"])
    return total - skipped, total


def test_experts_axes_grow_what_and_when_they_say(repro):
    size = repro.resolve_size("quick")
    inner = size["small"]["intermediate_size"]
    assert repro.axis_stages("upcycle-25", size, 1000) == [
        {"at_step": 250, "mlp_class_name": "LLaMAMoE", "n_expert": 4, "n_expert_per_token": 2, "rewarmup_steps": 50}]
    assert repro.axis_stages("upcycle-5", size, 1000)[0]["at_step"] == 50
    assert repro.axis_stages("experts-2x", size, 1000) == [{"at_step": 250, "n_expert": 8, "rewarmup_steps": 50}]
    dense = repro.build_config(size, "upcycle-25", repro.ROWS["upcycle drop-upcycle"], 1)
    assert dense["model_config"]["mlp_class_name"] == "LLaMAMLP" and "n_expert" not in dense["model_config"]
    assert dense["growth"]["stages"][0]["expert_init"] == "drop-upcycle"
    moe = repro.build_config(size, "experts-2x", repro.ROWS["experts 2x n_expert + K"], 1)
    assert {k: moe["model_config"][k] for k in ("mlp_class_name", "n_expert", "n_expert_per_token",
                                                 "moe_intermediate_size")} == {
        "mlp_class_name": "LLaMAMoE", "n_expert": 4, "n_expert_per_token": 2, "moe_intermediate_size": inner}
    assert moe["growth"]["stages"][0] == {"at_step": 250, "n_expert": 8, "rewarmup_steps": 50,
                                          "n_expert_per_token": 4}
    k4 = repro.build_config(size, "experts-2x", repro.ROWS[repro.MOE_K4_ISO], 1)["model_config"]
    assert (k4["n_expert"], k4["n_expert_per_token"]) == (8, 4)
    upcycled = repro.build_config(size, "upcycle-5", repro.ROWS[repro.ISO_FLOPS], 1)["model_config"]
    assert (upcycled["mlp_class_name"], upcycled["n_expert"], upcycled["n_expert_per_token"],
            upcycled["moe_intermediate_size"]) == ("LLaMAMoE", 4, 2, inner)
    # the experts rows apply to their own axes only, the width rows never to them
    assert repro.axis_rows("joint", ["SPARKLING", "upcycle copy", repro.DENSE_ISO]) == ["SPARKLING"]
    assert repro.axis_rows("upcycle-25", ["SPARKLING", "upcycle copy", "experts 2x n_expert", repro.DENSE_ISO]) \
        == ["upcycle copy", repro.DENSE_ISO]
    assert repro.axis_rows("experts-2x", ["upcycle copy", "experts 2x n_expert", repro.MOE_K4_ISO]) \
        == ["experts 2x n_expert", repro.MOE_K4_ISO]


@pytest.mark.parametrize("axis, row, versus", [
    ("upcycle-25", "upcycle copy", [repro_iso := "scratch large (iso-FLOPs)", "scratch small (iso-FLOPs)"]),
    ("experts-2x", "experts 2x n_expert", [repro_iso]),
    ("experts-2x", "experts 2x n_expert + K", ["scratch large K=4 (iso-FLOPs)"]),
])
def test_experts_iso_flops_count_active_parameters(repro, tmp_path, axis, row, versus):
    """Each comparison of an experts row trains the step count whose 6 x active parameters x tokens is nearest the
    growth row's FLOPs, active parameters counted here from the modules (the routed experts a token skips left
    out): an MoE's total parameters would give it far fewer steps."""
    size = repro.resolve_size("tiny")
    assert repro.comparisons(axis, row) == versus
    cells, refused = repro.plan_grid("tiny", size, [axis], [row, *versus], [1], tmp_path)
    assert refused == []
    by_row = {c["row"]: c for c in cells}
    grown = by_row[row]
    tps = grown["compute"]["tokens_per_step"]
    phases = [_moe_active_by_hand(grown["config"])[0]]
    assert grown["compute"]["active_params"][0] == phases[0]
    by_hand = 6.0 * tps * sum(n * k for n, k in zip(grown["compute"]["active_params"], grown["compute"]["phase_steps"]))
    assert grown["compute"]["flops"] == pytest.approx(by_hand, rel=1e-12)
    for name in versus:
        iso = by_row[name]
        active, total = _moe_active_by_hand(iso["config"])
        assert iso["compute"]["active_params"] == [active]
        per_step = 6.0 * active * tps
        assert abs(iso["compute"]["steps"] * per_step - by_hand) <= per_step / 2
        if "n_expert" in iso["config"]["model_config"]:
            assert total > active  # a count of every expert would have trained fewer steps
            assert round(by_hand / (6.0 * total * tps)) < iso["compute"]["steps"]
    if row == "experts 2x n_expert":  # E=4 -> 8 at K=2: the same active parameters, the same steps as the growth
        assert by_row[repro.ISO_FLOPS]["compute"]["steps"] == grown["compute"]["steps"]


def test_experts_scan_pairs_each_comparison_and_exports_the_init(repro, tmp_path):
    """Hand-made finished runs of the upcycle and experts-2x cells: each row's Δ against each of its comparisons,
    paired by seed (the K=4 row against the K=4 MoE, not the K=2 one); the exported cells name the map's axis
    (``upcycle`` / ``experts``) and the row's ``expert_init``, and load as measured cells."""
    from lightning_sparkling.pretrain.advice.measured import MeasuredCell

    size = repro.resolve_size("tiny")
    out, results, export = tmp_path / "runs", tmp_path / "results", tmp_path / "cells.json"
    rows = ["upcycle-25:upcycle copy", "upcycle-25:upcycle random", "experts-2x:experts 2x n_expert + K"]
    cells, _ = repro.scan_cells(size, [1], ["cosine"], ["upcycle-25", "experts-2x"], rows)
    runs, refused = repro.plan_scan("tiny", size, cells, [1, 2, 3], out)
    assert refused == []
    losses = {("upcycle-25", "upcycle copy"): [3.40, 3.50, 3.45], ("upcycle-25", "upcycle random"): [3.6, 3.7, 3.5],
              ("upcycle-25", repro.ISO_FLOPS): [3.45, 3.48, 3.50], ("upcycle-25", repro.DENSE_ISO): [3.3, 3.4, 3.5],
              ("experts-2x", "experts 2x n_expert + K"): [3.1, 3.2, 3.3],
              ("experts-2x", repro.MOE_K4_ISO): [3.2, 3.1, 3.5], ("experts-2x", repro.ISO_FLOPS): [9.0, 9.0, 9.0]}
    assert {(r["axis"], r["row"]) for r in runs} == set(losses) - {("experts-2x", repro.ISO_FLOPS)}
    for run in runs:
        _fake_run(Path(run["run_dir"]), losses[(run["axis"], run["row"])][run["seed"] - 1],
                  symmetry={"symmetry/stage_0/experts": 0.9} if "copy" in run["row"] else None)
        (Path(run["run_dir"]) / "config.yaml").write_text(yaml.safe_dump({**run["config"],
                                                                          "out_dir": run["run_dir"]}))
    assert repro.main(["--size", "tiny", "--scan", "--scan-ratios", "1", "--scan-schedules", "cosine", "--scan-axes",
                       "upcycle-25,experts-2x", "--scan-rows", ",".join(rows), "--out", str(out), "--results",
                       str(results), "--scan-export", str(export), "--tag", "moe"]) == 0
    payload = json.loads((results / "reproduce_tiny_scan_moe.json").read_text())
    lines = {ln["row"]: ln for ln in payload["lines"]}

    def paired(a, b):
        return [x - y for x, y in zip(losses[a], losses[b])]

    copy = lines["upcycle copy"]
    moe, dense = paired(("upcycle-25", "upcycle copy"), ("upcycle-25", repro.ISO_FLOPS)), \
        paired(("upcycle-25", "upcycle copy"), ("upcycle-25", repro.DENSE_ISO))
    assert copy["delta"] == pytest.approx(statistics.fmean(moe)) and copy["versus"] == repro.ISO_FLOPS
    assert copy["comparisons"][repro.ISO_FLOPS]["per_seed"] == pytest.approx(moe)
    assert copy["comparisons"][repro.DENSE_ISO]["per_seed"] == pytest.approx(dense)
    assert copy["comparisons"][repro.DENSE_ISO]["sd"] == pytest.approx(statistics.stdev(dense))
    assert copy["comparisons"][repro.DENSE_ISO]["wins"] == sum(d > 0 for d in dense) == 2
    assert {s: d["symmetry"] for s, d in copy["experts"].items()} == {str(s): {"stage_0/experts": pytest.approx(0.9)}
                                                                      for s in (1, 2, 3)}
    assert lines["upcycle random"]["experts"]["1"]["symmetry"] == {}  # no copies, no cosine
    k4 = lines["experts 2x n_expert + K"]
    k4_d = paired(("experts-2x", "experts 2x n_expert + K"), ("experts-2x", repro.MOE_K4_ISO))
    assert k4["versus"] == repro.MOE_K4_ISO and k4["per_seed"] == pytest.approx(k4_d)
    md = (results / "reproduce_tiny_scan_moe.md").read_text()
    assert f"{statistics.fmean(dense):+.3f} ± {statistics.stdev(dense):.3f}" in md
    exported = json.loads(export.read_text())
    measured = {(m.category, m.init): m for m in (MeasuredCell.from_json(cell) for cell in exported)}
    assert set(measured) == {("upcycle", "copy"), ("upcycle", "random"), ("experts+topk", "copy")}
    assert measured[("upcycle", "copy")].delta == round(statistics.fmean(moe), 3)
    assert measured[("upcycle", "copy")].recipe == "paper" and measured[("experts+topk", "copy")].growth_at == 0.25
    assert measured[("upcycle", "copy")].where == "Experts: dense -> MoE and MoE -> more experts (tiny)"
    upcycled = measured[("upcycle", "copy")]  # what staying dense gave: the cell's own comparison with its start
    assert (upcycled.start_delta, upcycled.start_sd, upcycled.start_seeds_above) == (
        round(statistics.fmean(dense), 3), round(statistics.stdev(dense), 3), 2)
    assert measured[("experts+topk", "copy")].start_delta is None
    assert measured[("experts+topk", "copy")].where == "Experts: dense -> MoE and MoE -> more experts (tiny)"
    assert repro.map_axis("experts-2x", "experts 2x n_expert") == "experts"  # as classify_category names the stages
    for cell in exported:
        assert json.loads(repro.format_cell(cell)) == cell  # the export pastes into measured.json as it is


def test_expert_load_counts_each_tokens_top_k_on_the_runs_validation_data(repro, tmp_path):
    """A final checkpoint whose routers send a token to experts {0, 2} or {1, 3} by the sign of one projection
    (rows u, -u, 2u, -2u): per block the fractions of tokens per expert pair up (0 with 2, 1 with 3), each pair's
    sum is 1 and all sum to K = 2, whatever the data; a dense run has no load."""
    import dataclasses

    import torch
    from litgpt import GPT, Config

    size = repro.resolve_size("tiny")
    config = repro.build_config(size, "experts-2x", repro.ROWS[repro.ISO_FLOPS], 1)
    config["data"] = {"vocab_size": 512, "seq_len": 32, "max_files": 20, "max_bytes": 150_000, "val_percent": 20,
                      "cache_dir": str(tmp_path / "cache")}
    config["model_config"]["block_size"] = 32
    config["train"].update(global_batch_size=4, micro_batch_size=4)
    run_dir = tmp_path / "run"
    (run_dir / "final").mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({**config, "out_dir": str(run_dir)}))
    model_config = Config(**{k: v for k, v in config["model_config"].items() if k != "name"}, vocab_size=512,
                          padded_vocab_size=512)
    torch.manual_seed(0)
    model = GPT(model_config)
    with torch.no_grad():
        for block in model.transformer.h:
            u = torch.randn(model_config.n_embd)
            block.mlp.gate.weight.copy_(torch.stack([u, -u, 2 * u, -2 * u, 0 * u, 0 * u, 0 * u, 0 * u]) * 10)
    torch.save(model.state_dict(), run_dir / "final" / "lit_model.pth")
    (run_dir / "final" / "model_config.yaml").write_text(yaml.safe_dump(dataclasses.asdict(model_config)))
    load = repro.expert_load(run_dir, batches=2)
    assert sorted(load) == [f"block_{i}" for i in range(model_config.n_layer)]
    for fractions in load.values():
        assert len(fractions) == 8 and fractions[4:] == [0.0] * 4
        assert fractions[0] == pytest.approx(fractions[2]) and fractions[1] == pytest.approx(fractions[3])
        assert fractions[0] + fractions[1] == pytest.approx(1.0) and sum(fractions) == pytest.approx(2.0)
        assert 0 < fractions[0] < 1  # both signs occur on real text
    assert repro.expert_load(tmp_path / "no-run") == {}


def test_experts_cells_are_named_as_the_package_classifies_their_stages(repro):
    """The axis and init a scan exports for an experts row are what ``measured.advise`` reads off that row's own
    stage, so ``plan`` on the same run finds the cell."""
    from lightning_sparkling import GrowthStage
    from lightning_sparkling.pretrain.advice.measured import classify_category

    size = repro.resolve_size("quick")
    named = set()
    for axis in repro.EXPERT_AXES:
        for row in repro.axis_rows(axis, list(repro.ROWS)):
            if "stage" not in repro.ROWS[row]:
                continue
            (stage,) = repro.build_config(size, axis, repro.ROWS[row], 1)["growth"]["stages"]
            stage = GrowthStage(**stage)
            assert classify_category([stage]) == repro.map_axis(axis, row)
            assert stage.expert_init == repro.map_init(axis, row)
            named.add((repro.map_axis(axis, row), repro.map_init(axis, row)))
    assert named == {("upcycle", "copy"), ("upcycle", "drop-upcycle"), ("upcycle", "random"), ("experts", "copy"),
                     ("experts+topk", "copy")}


def test_gpu_examples_shrink_keeps_each_example_valid_and_its_growth_in_the_run(tmp_path, capsys):
    """benchmarks/gpu_examples.py shortens every GPU example to a few dozen steps: the result must still be a
    config `sparkling plan` accepts, with each stage at its share of the run and its re-warmup inside it."""
    import importlib.util

    import yaml

    from lightning_sparkling.pretrain.cli import main

    spec = importlib.util.spec_from_file_location("gpu_examples", ROOT / "benchmarks" / "gpu_examples.py")
    gpu_examples = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_examples)
    for name in gpu_examples.EXAMPLES:
        original = yaml.safe_load((ROOT / "examples" / f"{name}.yaml").read_text())
        config, at_steps = gpu_examples.shrink(yaml.safe_load((ROOT / "examples" / f"{name}.yaml").read_text()), 40,
                                               tmp_path / name)
        shares = [s["at_tokens"] / original["train"]["max_tokens"] for s in original["growth"]["stages"]]
        assert at_steps == [round(share * 40) for share in shares], name
        assert all(0 < s["rewarmup_steps"] <= (40 - s["at_step"]) // 2 for s in config["growth"]["stages"]), name
        assert config["data"]["source"] == "stdlib" and config["train"]["save_interval"] is None
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        assert main(["plan", "--config", str(path)]) == 0, (name, capsys.readouterr().out[-2000:])


def test_gpu_examples_reports_the_growth_that_happened(tmp_path, monkeypatch):
    """run_one on a tiny example (CPU): the row's growth steps are the run's growth events, read from its
    summary.json, beside the stage steps it planned."""
    import importlib.util
    import sys

    import yaml

    sys.path.insert(0, str(ROOT / "tests" / "pretrain"))
    from test_cli import tiny_config

    spec = importlib.util.spec_from_file_location("gpu_examples", ROOT / "benchmarks" / "gpu_examples.py")
    gpu_examples = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_examples)
    config = tiny_config(tmp_path / "cache")
    tokens_per_step = config["train"]["global_batch_size"] * config["data"]["seq_len"]
    del config["train"]["max_steps"]
    config["train"]["max_tokens"] = 100 * tokens_per_step
    config["growth"]["stages"][0] = {**config["growth"]["stages"][0], "at_tokens": 50 * tokens_per_step}
    del config["growth"]["stages"][0]["at_step"]
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "tiny.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.setattr(gpu_examples, "ROOT", tmp_path)
    row = gpu_examples.run_one("tiny", 12, tmp_path / "work", timeout=300)
    assert row["rc"] == 0, row.get("tail")
    assert row["planned_growth_steps"] == [6] and row["grew_at"] == [6] and row["steps"] == 12
    assert row["params"][0] < row["params"][1]
