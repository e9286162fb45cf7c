"""docs/REFERENCE.md stays complete: every key of the CLI's schema and every tag the code can log is named there."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

import lightning_sparkling

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(lightning_sparkling.__file__).parent
REFERENCE = ROOT / "docs" / "REFERENCE.md"
TAG_PREFIXES = ("rms/", "growth/", "symmetry/", "throughput/", "lr_new/")
# logged by Lightning, not by this package's code: its epoch counter and LearningRateMonitor's baseline LR
LIGHTNING_TAGS = ("epoch", "lr-AdamW")


def _documented() -> set[str]:
    """Every `backticked` name of REFERENCE.md."""
    return set(re.findall(r"`([^`\n]+)`", REFERENCE.read_text()))


def config_keys() -> list[str]:
    """Every key `sparkling pretrain` takes: the jsonargparse parser's, each section's fields, each stage's fields."""
    from lightning_sparkling.pretrain.cli import build_parser
    from lightning_sparkling.pretrain.config.schema import _SECTIONS, StageArgs

    keys = [a.dest for a in build_parser()._actions if a.dest not in ("help", "config", "print_config")]
    for section, cls in _SECTIONS.items():
        keys += [f"{section}.{f.name}" for f in dataclasses.fields(cls)]
    keys += [f"growth.stages[].{f.name}" for f in dataclasses.fields(StageArgs)]
    return sorted(set(keys))


def test_every_config_key_is_in_the_reference():
    keys = config_keys()
    assert {"data.source", "train.max_steps", "growth.stages", "growth.stages[].n_embd", "rms_monitor.per_linear",
            "growth.stages[].symmetry_target"} <= set(keys)  # the schema was read
    rows = set(re.findall(r"^\| `([^`]+)` \|", REFERENCE.read_text(), flags=re.M))  # the reference table's key column
    missing = [k for k in keys if k not in rows]
    assert not missing, f"docs/REFERENCE.md's configuration table lacks {missing}"


def _literal(node: ast.AST) -> str | None:
    """A string literal's text, an f-string's with each placeholder as ``{}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def logged_tag_patterns() -> set[str]:
    """Tag literals of the code that logs (callbacks/, pretrain/): every string shaped like a tag under one of the
    package's prefixes, and the names given to ``self.log(...)`` or as keys of ``log_metrics`` / ``metrics`` dicts."""
    found: set[str] = set()
    for path in [*(PACKAGE / "callbacks").rglob("*.py"), *(PACKAGE / "pretrain").rglob("*.py")]:
        tree = ast.parse(path.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr)}
        for node in ast.walk(tree):
            text = None if id(node) in docstrings else _literal(node)
            if text and text.startswith(TAG_PREFIXES) and re.fullmatch(r"[\w/{}.\-]+", text):
                found.add(text + "{}" if text.endswith(("_", "/")) else text)  # a prefix: the tags it starts
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                if node.func.attr == "log" and (name := _literal(node.args[0])):
                    found.add(name)
                if node.func.attr == "log_metrics" and isinstance(node.args[0], ast.Dict):
                    found.update(t for k in node.args[0].keys if k is not None and (t := _literal(k)))
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "metrics"
                                                    for t in node.targets) and isinstance(node.value, ast.Dict):
                found.update(t for k in node.value.keys if k is not None and (t := _literal(k)))
    return found


def symmetry_tags() -> list[str]:
    """``symmetry/stage_k/<channel>`` for every channel dimension a growth can copy: the widths, the heads' query /
    key / value channel dimensions (the plan's head layout), and depth's ``symmetry_key``."""
    from conftest import llama_config
    from lightning_sparkling.growth.depth_maps import DEPTH_SIZE_KEY
    from lightning_sparkling.growth.plan import plan_growth
    from lightning_sparkling.growth.stage import WIDTH_SIZE_KEYS, GrowthStage

    plan = plan_growth(llama_config(norm_qk=True), GrowthStage(1, n_head=8, n_query_groups=4))
    head_channels = sorted(c for c in plan.channels if c.startswith("attn_"))
    assert "attn_q" in head_channels and "attn_qkv" in head_channels, head_channels
    return [f"symmetry/stage_k/{channel}" for channel in (*WIDTH_SIZE_KEYS, *head_channels, DEPTH_SIZE_KEY)]


def _matches_documented(pattern: str, documented: set[str]) -> bool:
    """Whether a code tag (``{}`` placeholders) names a documented tag (``stage_k``, ``block_XX``, ``<axis>``...)."""
    regex = "".join(r"\S+" if part == "{}" else re.escape(part) for part in re.split(r"(\{\})", pattern))
    return any(re.fullmatch(regex + r"(/\S+)?", doc) for doc in documented)


def test_every_logged_tag_is_in_the_reference():
    tags = logged_tag_patterns()
    assert {"train_loss", "val_loss", "val_ppl", "tokens", "flops", "growth/event", "rms/final_hidden",
            "growth/lr_new/stage_{}", "growth/symmetry_boost/stage_{}", "symmetry/stage_{}"} <= tags  # the scan works
    documented = _documented()
    missing = [t for t in sorted(tags) if not _matches_documented(t, documented)]
    assert not missing, f"docs/REFERENCE.md names no tag for {missing}"
    missing = [t for t in (*symmetry_tags(), *LIGHTNING_TAGS) if t not in documented]
    assert not missing, f"docs/REFERENCE.md lacks {missing}"


@pytest.mark.parametrize("tag", ["growth/symmetry_boost/stage_k", "symmetry/stage_k/attn_q", "epoch",
                                 "rms/final_hidden"])
def test_tags_the_issue_named_are_in_the_tag_table(tag):
    table = REFERENCE.read_text().split("## TensorBoard tags", 1)[1]
    assert f"`{tag}`" in table
