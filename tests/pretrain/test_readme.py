"""What the README claims stays true: its first two commands, its line lengths, its length, its links, its example
refusal (a real one, on the quickstart config), its measured numbers (each in docs/BENCHMARKS.md), its figure (drawn
from the measured map by docs/make_speedup_figure.py), its Python snippet, and the quickstart's time (the same words in
the README and in the YAML)."""

from __future__ import annotations

import json
import re
import runpy
from pathlib import Path

import pytest

import lightning_sparkling

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
QUICKSTART_TIME = "about 2 minutes on an idle machine"


def _text() -> str:
    return README.read_text()


def _blocks(lang: str) -> list[str]:
    """The README's fenced code blocks opened with ```` ```lang ````."""
    blocks, current = [], None
    for line in _text().splitlines():
        if line.startswith("```"):
            if current is None:
                current = [] if line[3:].strip() == lang else False
            else:
                if current is not False:
                    blocks.append("\n".join(current))
                current = None
        elif isinstance(current, list):
            current.append(line)
    return blocks


def test_lines_are_at_most_120_characters():
    long = [(n, len(line)) for n, line in enumerate(_text().splitlines(), 1) if len(line) > 120]
    assert not long, f"README lines over 120 characters (line, length): {long}"


def test_is_at_most_250_lines():
    assert len(_text().splitlines()) <= 250


def test_opens_with_the_two_commands_and_the_test_command_is_ci_s():
    first_screen = _text().split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)\n```", first_screen, flags=re.S)
    assert len(commands) == 2 and all("\n" not in c for c in commands), commands
    train, tests = commands
    assert train.startswith("pip install") and train.endswith("sparkling pretrain --config examples/quickstart.yaml")
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    ci_test = ci[ci.index("# the README's test command:") + 1]
    assert tests.startswith("pip install") and tests.endswith(" && " + ci_test), (tests, ci_test)
    for word in ("hidden size", "MLP or MoE-expert inner size", "heads", "layers", "experts", "named litgpt config"):
        assert word in " ".join(first_screen.split("\n\n")[1].split()), word  # the first paragraph says what grows


def test_local_links_and_anchors_exist():
    text = _text()
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert (ROOT / target).exists(), target
    for target, anchor in re.findall(r"\]\(([^)#:]+\.md)#([^)]+)\)", text):
        headings = re.findall(r"^#+ (.+)$", (ROOT / target).read_text(), flags=re.M)
        slugs = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}
        assert anchor in slugs, (target, anchor)


def test_the_example_refusal_happens_on_the_quickstart(tmp_path, capsys):
    from lightning_sparkling.pretrain.cli import main

    block = next(b for b in _blocks("") if "$ sparkling pretrain" in b)
    command, shown = [line for line in block.splitlines() if line.strip()]
    args = command.removeprefix("$ sparkling ").split()
    out_dir = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--out_dir", str(out_dir), "--data.cache_dir", str(tmp_path / "cache")])
    assert exit_info.value.code == 2 and not out_dir.exists() and not (tmp_path / "cache").exists()
    error = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(error) == 1
    assert error[0].startswith(shown.removesuffix("...").rstrip()), (error[0], shown)


def test_every_measured_number_is_in_benchmarks():
    benchmarks = (ROOT / "docs" / "BENCHMARKS.md").read_text()
    numbers = re.findall(r"\d\.\d{3} ± \d\.\d{3}", _text())
    assert len(numbers) >= 10  # the table's rows, at least
    missing = [n for n in numbers if n not in benchmarks]
    assert not missing, f"README numbers not in docs/BENCHMARKS.md: {missing}"


def test_the_quickstart_time_is_said_the_same_way():
    assert QUICKSTART_TIME in " ".join(_text().split())
    assert QUICKSTART_TIME in " ".join(line.lstrip("# ") for line in QUICKSTART.read_text().splitlines()[:3])


def test_the_python_snippet_builds_its_trainer():
    snippet = next(b for b in _blocks("python") if "L.Trainer(" in b)
    names = re.search(r"from lightning_sparkling import (.+)", snippet).group(1).split(", ")
    if "GrowthCallback" in names and not hasattr(lightning_sparkling, "GrowthCallback"):
        pytest.skip("GrowthCallback (the new name of WidthGrowthCallback) is not in this branch yet")
    code = snippet.replace("trainer.fit(my_module, my_datamodule)", "")
    assert code != snippet
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    trainer = namespace["trainer"]
    assert trainer.max_steps == 2000
    growth = next(c for c in trainer.callbacks if type(c).__name__ in ("GrowthCallback", "WidthGrowthCallback"))
    assert growth.stages[0].n_embd == 1024
    if "WidthGrowthCallback" in _text():  # the old name, said to be an alias, must be one
        assert lightning_sparkling.WidthGrowthCallback is not None


def test_the_figure_is_drawn_from_the_measured_cells(tmp_path, capsys):
    """docs/make_speedup_figure.py writes the README's figure, and every point it plots is a cell of measured.json
    with a measured speed-up (its ratio, speed-up, sd and ceiling), each such cell plotted once."""
    assert "](docs/img/speedup_at_equal_loss.png)" in _text()
    assert (ROOT / "docs" / "img" / "speedup_at_equal_loss.png").is_file()
    script = runpy.run_path(str(ROOT / "docs" / "make_speedup_figure.py"))
    image = tmp_path / "img" / "speedup.png"
    assert script["main"](["--image", str(image), "--dpi", "40"]) == 0
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plotted = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    fields = ("axis", "recipe", "schedule", "tokens_per_param", "speedup", "speedup_sd", "ceiling", "params", "where")
    cells = json.loads((ROOT / "lightning_sparkling/pretrain/advice/measured.json").read_text())["cells"]
    measured = sorted(json.dumps([c.get(k) for k in fields]) for c in cells if c.get("speedup") is not None)
    assert len(measured) >= 20
    assert sorted(json.dumps([p[k] for k in fields]) for p in plotted) == measured
    assert {p["panel"] for p in plotted} == {"width", "depth", "depth + width", "experts"}
    assert all(p["speedup_sd"] > 0 and p["ceiling"] > 1 for p in plotted)
