"""No module of the package imports an underscore name from another of its modules: a name another module needs is
public where it is defined. :data:`ALLOWED` lists the imports still to make public; the test fails on a new one and
on an entry that is gone (shrink the list as they are renamed)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import lightning_sparkling

ROOT = Path(lightning_sparkling.__file__).parent

ALLOWED = frozenset({
    "dashboards.plotting imports dashboards.scalars._load_all",
    "dashboards.plotting imports dashboards.scalars._run_name",
    "dashboards.plotting imports dashboards.scalars._summary_growths",
    "growth.compute imports growth.plan._check_model_kind",
    "growth.schedules imports growth.lr_formulas._check_wsd",
    "growth.stage imports growth.stage_checks._checked_extra",
    "growth.stage imports growth.stage_checks._default",
    "pretrain.advice.planning imports pretrain.formatting._console",
    "pretrain.advice.planning imports pretrain.formatting._fmt_flops",
    "pretrain.advice.planning imports pretrain.formatting._model_line",
    "pretrain.cli imports pretrain.errors._one_line_error",
    "pretrain.cli imports pretrain.training.trainer._build_trainer",
    "pretrain.cli imports pretrain.training.trainer._callbacks_module",
    "pretrain.cli imports pretrain.training.trainer._strategy",
    "pretrain.config.resolve imports pretrain.config.resume._newest_to_resume",
    "pretrain.config.resolve imports pretrain.config.schema._as",
    "pretrain.config.resolve imports pretrain.config.schema._get",
    "pretrain.config.resolve imports pretrain.config.stages._resolve_stages",
    "pretrain.config.resolve imports pretrain.errors._positive_int",
    "pretrain.config.resolve imports pretrain.model.model_config._initial_model_config",
    "pretrain.config.resolve imports pretrain.model.optim._check_fresh_bias_correction",
    "pretrain.config.resolve imports pretrain.model.optim._optimizer_info",
    "pretrain.config.resume imports pretrain.model.model_config._expected_shapes",
    "pretrain.config.stages imports pretrain.errors._positive_int",
    "pretrain.data.datamodule imports pretrain.data.corpus._iter_texts",
    "pretrain.data.datamodule imports pretrain.data.token_cache._corpus_cache_path",
    "pretrain.data.datamodule imports pretrain.data.token_cache._publish_cache",
    "pretrain.data.datamodule imports pretrain.data.token_cache._read_cache_meta",
    "pretrain.data.datamodule imports pretrain.data.token_cache._token_dtype",
    "pretrain.data.datamodule imports pretrain.data.token_cache._tokenize_to_file",
    "pretrain.data.datamodule imports pretrain.data.token_cache._tokenizer_corpus_key",
    "pretrain.data.token_cache imports pretrain.data.corpus._read_text",
    "pretrain.training.lightning_private imports pretrain.formatting._fmt_int",
    "pretrain.training.module imports pretrain.model.gpt._as_config",
    "pretrain.training.module imports pretrain.model.gpt._rebuilt_gpt",
    "pretrain.training.run imports pretrain.formatting._fmt_flops",
    "pretrain.training.run imports pretrain.formatting._info",
    "pretrain.training.run imports pretrain.formatting._model_line",
    "pretrain.training.run imports pretrain.training.summary._run_summary",
    "pretrain.training.run imports pretrain.training.summary._write_outputs",
    "pretrain.training.run imports pretrain.training.trainer._build_callbacks",
    "pretrain.training.run imports pretrain.training.trainer._build_trainer",
    "pretrain.training.run imports pretrain.training.trainer._RunCallbacks",
    "pretrain.training.run_callbacks imports pretrain.formatting._info",
    "pretrain.training.summary imports pretrain.formatting._console",
    "pretrain.training.summary imports pretrain.formatting._fmt_flops",
    "pretrain.training.summary imports pretrain.formatting._fmt_int",
    "pretrain.training.summary imports pretrain.training.trainer._RunCallbacks",
})
"""``"<importer> imports <module>.<name>"``, module paths under ``lightning_sparkling``."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _short(name: str) -> str:
    return name.removeprefix("lightning_sparkling.")


def underscore_imports() -> set[str]:
    """Every ``from lightning_sparkling.<module> import _name`` of the package (at the top or inside a function) whose
    module is not the importer itself; dunder names (``__version__``) are public."""
    found = set()
    for path in sorted(ROOT.rglob("*.py")):
        importer = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lightning_sparkling")):
                continue
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.endswith("__")
                if private and node.module != importer:
                    found.add(f"{_short(importer)} imports {_short(node.module)}.{alias.name}")
    return found


def test_no_module_imports_an_underscore_name_from_another():
    found = underscore_imports()
    assert sorted(found - ALLOWED) == [], "make these names public where they are defined"
    assert sorted(ALLOWED - found) == [], "renamed or gone: remove from ALLOWED"


def test_the_check_sees_an_underscore_import(tmp_path, monkeypatch):
    """The walk finds a private import in a function body and skips a module's own and dunder names."""
    package = tmp_path / "lightning_sparkling"
    (package / "a").mkdir(parents=True)
    (package / "__init__.py").write_text("from lightning_sparkling import __version__\n")
    (package / "a" / "__init__.py").write_text("from lightning_sparkling.a import _own\n")
    (package / "a" / "b.py").write_text("def f():\n    from lightning_sparkling.a.c import _x, y\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", package)
    assert underscore_imports() == {"a.b imports a.c._x"}
