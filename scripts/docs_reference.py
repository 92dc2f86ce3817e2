"""The site's generated reference pages, written from the code at build time (an mkdocs hook, see mkdocs.yml).

reference/cli.md from the typer app, reference/job-spec.md from the job spec's pydantic models,
reference/settings.md from `Settings`, reference/catalog.md from the catalog's datasets. They are added
to the build in memory (nothing is written under docs/), so the site always says what the code does.

`python scripts/docs_reference.py OUT_DIR` writes the same pages to OUT_DIR, to read them without a build.
"""

from __future__ import annotations

import ast
import enum
import sys
import types
import typing
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# mkdocs restores sys.path after loading a hook: the project's root goes in for good, the column
# meanings beside this file are loaded by path (_column_meanings).
if str(PROJECT_ROOT) not in sys.path:
    sys.path.append(str(PROJECT_ROOT))

GENERATED_NOTE = (
    "*Generated from the code by `scripts/docs_reference.py` when the site is built; edit the code, not this page.*"
)


def _cell(text: object) -> str:
    """Text fit for one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: object) -> str:
    shown = str(text).replace("|", "\\|")
    return f"`` {shown} ``" if "`" in shown else f"`{shown}`"


# The CLI, from the typer app.


def cli_page() -> str:
    import typer
    import typer.main
    from typer.cli import get_docs_for_click

    from cli.score import app

    command = typer.main.get_command(app)
    ctx = typer.Context(command, info_name="score")
    ctx.ensure_object(dict)
    text = get_docs_for_click(obj=command, ctx=ctx, name="score")
    # typer's page starts at `# score`; under this page's own title every heading goes one level down.
    body = "\n".join(
        f"#{line}" if line.startswith("#") and not line.startswith("#!") else line for line in text.splitlines()
    )
    return "\n".join(
        [
            "# CLI reference",
            "",
            GENERATED_NOTE,
            "",
            "Every command and option of `score`, from the typer app (`cli/score.py`); exit codes are in the",
            "[runbook](../operations/runbook.md).",
            "",
            body.strip(),
            "",
        ]
    )


def _default_text(value: object) -> str:
    if value is None or value == ():
        return "—"
    if value == "":
        return '`""`'
    if isinstance(value, enum.Enum):
        value = value.value
    return _code(value)


# The job spec, from its pydantic models.

KEY_MEANINGS = {
    "name": "The job's name, as it appears in every output path and table row.",
    "description": "One sentence about the job, for people.",
    "entity_column": "The raw column that identifies one entity; its value is `entity_id` in every output.",
    "model": "The final model: its registry name, the version or alias scored, a challenger.",
    "inference": "How the model runs: device and retries (tasks/inference/config.py).",
    "prediction": "The business half: score, threshold rules, decisions, reason codes (tasks/prediction/config.py).",
    "limits": "What a partition run must keep, else it fails before anything is published.",
    "drift": "Drift flag thresholds, and whether a model without training reference statistics may score.",
    "prediction.rules": (
        "The threshold rule table: no overlap, no gap (proven when the spec loads); every row gets one rule."
    ),
    "prediction.reasons": "Reason codes: for which decisions, how many, a code and texts per feature.",
    "drift.psi_warn": "PSI at which a feature's drift is flagged warn.",
    "drift.psi_alert": "PSI at which it is flagged alert.",
    "drift.ks_warn": "KS statistic at which a feature's drift is flagged warn.",
    "drift.ks_alert": "KS statistic at which it is flagged alert.",
    "model.feature_models[].version": "Version or alias of the feature model.",
    "prediction.rules[].description": "What the rule means, for people.",
    "prediction.rules[].decision": "The decision of the rows the rule takes.",
    "prediction.reasons.top_k": "Most reason codes a row gets.",
    "prediction.reasons.codes.<name>.code": "The feature's reason code.",
}
"""Meanings of the keys whose model field carries no description (tasks/jobspec.py and the layers' config.py)."""


def job_spec_page() -> str:
    from tasks.jobspec import JobSpec

    out = ["# Job spec reference", "", GENERATED_NOTE, ""]
    out += [
        "A job spec is `jobs/<job>.yaml`, validated whole when it loads (`tasks/jobspec.py: JobSpec`,",
        "which composes each layer's own section). Unknown keys are refused. Every key below, with its type,",
        "its default (`required` when it has none) and its meaning; `[]` marks an item of a list, `<name>` a",
        "key of your choosing.",
        "",
    ]
    sections: list[tuple[str, type]] = []
    out += _model_table("", JobSpec, sections)
    seen = {JobSpec}
    while sections:
        path, model = sections.pop(0)
        if model in seen and path.count(".") > 3:
            continue
        seen.add(model)
        doc = (model.__doc__ or "").strip()
        out += ["", f"## `{path}`", ""]
        if doc and not doc.startswith(("A base class", "Usage docs")):
            out += [doc, ""]
        out += _model_table(path, model, sections)
    return "\n".join(out) + "\n"


def _model_table(prefix: str, model: type, sections: list[tuple[str, type]]) -> list[str]:
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        key = field.alias or name
        path = f"{prefix}.{key}" if prefix else key
        for sub_path, sub in _nested_models(path, field.annotation):
            if issubclass(sub, BaseModel):
                sections.append((sub_path, sub))
        if field.is_required():
            default = "required"
        elif field.default_factory is not None:
            produced = field.default_factory()
            default = "section defaults" if isinstance(produced, BaseModel) else _default_text(_plain(produced))
        elif field.default is PydanticUndefined:
            default = "required"
        elif isinstance(field.default, BaseModel):
            default = "section defaults"
        else:
            default = _default_text(_plain(field.default))
        nested = _nested_models(path, field.annotation)
        meaning = (
            field.description or KEY_MEANINGS.get(path) or (_first_sentence(nested[0][1].__doc__) if nested else "")
        )
        if not meaning:
            raise SystemExit(f"job spec key {path} has no description: give its Field one, or a line in KEY_MEANINGS")
        link = f" ([below](#{_anchor(nested[0][0])}))" if nested else ""
        rows.append(f"| `{path}` | {_cell(_type_text(field.annotation))} | {_cell(default)} | {_cell(meaning)}{link} |")
    return rows


def _first_sentence(doc: str | None) -> str:
    text = " ".join((doc or "").split())
    return (
        ""
        if text.startswith(("A base class", "Usage docs"))
        else text.split(". ")[0].rstrip(".") + ("." if text else "")
    )


def _anchor(path: str) -> str:
    """The id mkdocs' toc gives the heading `## `path``."""
    import re

    return re.sub(r"[^\w\- ]", "", path.lower()).strip().replace(" ", "-")


def _nested_models(path: str, annotation: object) -> list[tuple[str, type]]:
    from pydantic import BaseModel

    found: list[tuple[str, type]] = []
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        found.append((path, annotation))
    elif origin in (typing.Union, types.UnionType) or origin is typing.Annotated:
        for arg in args if origin is not typing.Annotated else args[:1]:
            found += _nested_models(path, arg)
    elif origin in (list, tuple, set, frozenset) and args:
        found += _nested_models(f"{path}[]", args[0])
    elif origin is dict and len(args) == 2:
        found += _nested_models(f"{path}.<name>", args[1])
    return found


def _type_text(annotation: object) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is type(None):
        return "null"
    if origin is typing.Literal:
        return " | ".join(repr(a) if not isinstance(a, str) else a for a in args)
    if origin is typing.Annotated:
        return _type_text(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_text(a) for a in args)
    if origin in (list, tuple, set, frozenset):
        inner = ", ".join(_type_text(a) for a in args if a is not Ellipsis)
        return f"list of {inner}" if inner else "list"
    if origin is dict:
        return f"map of {_type_text(args[0])} → {_type_text(args[1])}" if args else "map"
    if isinstance(annotation, type):
        if issubclass(annotation, enum.Enum):
            return " | ".join(str(m.value) for m in annotation)
        names = {
            "str": "text",
            "int": "integer",
            "float": "number",
            "bool": "boolean",
            "Path": "path",
            "date": "date",
            "SecretStr": "text (secret)",
        }
        return names.get(annotation.__name__, annotation.__name__)
    return str(annotation).replace("typing.", "")


def _plain(value: object) -> object:
    if isinstance(value, Path):
        try:
            return f"<checkout>/{value.relative_to(PROJECT_ROOT)}"
        except ValueError:
            return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (dict, list, tuple)) and not value:
        return "{}" if isinstance(value, dict) else "[]"
    return value


# Settings, from the environment model.


def settings_page() -> str:
    from tasks.settings import Settings

    prefix = Settings.model_config.get("env_prefix", "")
    out = ["# Settings reference", "", GENERATED_NOTE, ""]
    out += [
        _cell(Settings.__doc__ or ""),
        "They are read in one place (`tasks/settings.py: Settings`) and validated when read: a value that",
        "does not fit stops the command with one `error:` line naming the variable and the value, exit 3",
        "(see [Configuration](configuration.md)).",
        "",
        "| variable | type | default | meaning |",
        "|---|---|---|---|",
    ]
    for name, field in Settings.model_fields.items():
        default = "—" if field.default is None else _default_text(_plain(field.default))
        if field.default_factory is not None:
            default = _default_text(_plain(field.default_factory()))
        out.append(
            f"| `{prefix}{name.upper()}` | {_cell(_type_text(field.annotation))} | {_cell(default)} "
            f"| {_cell(field.description or '')} |"
        )
    return "\n".join(out) + "\n"


# Outputs, from the catalog.


def catalog_page() -> str:
    from tasks import catalog

    column_meaning = _column_meanings().column_meaning
    docs = _module_docstrings(Path(catalog.__file__))
    names = {id(value): name for name, value in vars(catalog).items() if isinstance(value, catalog.Dataset)}
    groups = [
        ("What a scoring run publishes", catalog.PARTITION_DATASETS, "PARTITION_DATASETS"),
        ("Staged only", tuple(d for d in catalog.STAGED_DATASETS if d not in catalog.PARTITION_DATASETS), None),
        ("The ledgers", catalog.LEDGER_DATASETS, "LEDGER_DATASETS"),
        ("Monitoring and realized outcomes", catalog.MONITORING_DATASETS, "MONITORING_DATASETS"),
    ]
    out = ["# Output tables reference", "", GENERATED_NOTE, ""]
    out += [
        "Every dataset of the product is described once, in `tasks/catalog.py`; this page is that catalog. A dataset's",
        "Parquet folder is `data/output/<job>/<folder>/date=YYYY-MM-DD/`, its warehouse table has the same",
        "columns in the",
        "same order and types (DuckDB or PostgreSQL, and the Delta tables of a `sinks.delta` job). See",
        "[Outputs](outputs.md) for how a partition is published and read.",
        "",
    ]
    missing: list[str] = []
    for title, datasets, group_name in groups:
        out += [f"## {title}", ""]
        if group_name and docs.get(group_name):
            out += [docs[group_name], ""]
        for d in datasets:
            out += [f"### `{d.table or d.name}`", ""]
            if docs.get(names.get(id(d), "")):
                out += [docs[names[id(d)]], ""]
            facts = [
                f"folder `{d.folder}/`" if d.folder else "no Parquet folder (warehouse only)",
                f"table `{d.table}`" if d.table else "no warehouse table (staged files only)",
            ]
            if d.keys:
                facts.append(
                    ("primary key " if d.primary_key else "one row per ") + ", ".join(f"`{k}`" for k in d.keys)
                )
            if d.partitioned:
                facts.append("replaced whole per (job, partition_date)")
            if d.staged:
                facts.append(f"staged per {d.staged}")
            if not d.published:
                facts.append("never published")
            out += ["; ".join(facts) + ".", ""]
            if d.schema is None:
                out += ["Its columns depend on the model (not fixed).", ""]
                continue
            out += ["| column | type | meaning |", "|---|---|---|"]
            for f in d.schema:
                meaning = column_meaning(d.name, f.name)
                if meaning is None:
                    missing.append(f"{d.name}.{f.name}")
                    meaning = ""
                kind = str(f.type) + ("" if f.nullable else ", not null")
                out.append(f"| `{f.name}` | {_cell(kind)} | {_cell(meaning)} |")
            out.append("")
    if missing:
        raise SystemExit(
            f"scripts/docs_columns.py gives no meaning for {len(missing)} catalog column(s): {', '.join(missing)}"
        )
    return "\n".join(out) + "\n"


def _column_meanings() -> types.ModuleType:
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_columns", Path(__file__).with_name("docs_columns.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _module_docstrings(path: Path) -> dict[str, str]:
    """Name → the string literal right after its assignment (the attribute docstrings of a module)."""
    body = ast.parse(path.read_text()).body
    found: dict[str, str] = {}
    for node, after in zip(body, body[1:], strict=False):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if (
            len(targets) == 1
            and isinstance(targets[0], ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            found[targets[0].id] = " ".join(after.value.value.split())
    return found


def pages() -> dict[str, str]:
    return {
        "reference/cli.md": cli_page(),
        "reference/job-spec.md": job_spec_page(),
        "reference/settings.md": settings_page(),
        "reference/catalog.md": catalog_page(),
    }


def on_files(files, config):  # noqa: ANN001, ANN201
    """mkdocs hook: add the generated pages to the build."""
    from mkdocs.structure.files import File

    for uri, text in pages().items():
        files.append(File.generated(config, uri, content=text))
    return files


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "build/reference")
    for uri, text in pages().items():
        (target / uri).parent.mkdir(parents=True, exist_ok=True)
        (target / uri).write_text(text)
        print(target / uri)
