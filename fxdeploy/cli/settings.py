"""CLI flags generated from the Settings dataclasses and their field docstrings, plus config files.

``--threads``, ``--capture-mode``, ``--ncnn-fp16/--no-ncnn-fp16`` ... come from the fields, so a
new setting is a CLI flag with help text the moment it is added; a plugin target's section
(``Target.sections``) gets its flags the same way. Resolution order: preset, then
``--config file.toml``, then flags. ``--print-settings`` prints the result.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import json
import textwrap
import typing
from pathlib import Path
from typing import Any, Literal

import tomllib

from fxdeploy import settings as settings_mod
from fxdeploy.cli.checks import UsageError, existing_file
from fxdeploy.errors import RegistryError
from fxdeploy.settings import Settings


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """{field: docstring} of one settings dataclass, read from its own source (strings after fields):
    fxdeploy's tables and a plugin target's sections alike."""
    try:
        node = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):  # no source at hand: flags without help text
        return {}
    docs: dict[str, str] = {}
    body = node.body if isinstance(node, ast.ClassDef) else []
    for current, following in zip(body, body[1:], strict=False):
        if isinstance(current, ast.AnnAssign) and isinstance(current.target, ast.Name):
            if isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant):
                docs[current.target.id] = " ".join(str(following.value.value).split())
    return docs


def tables() -> dict[str, Any]:
    """Each settings table by name, with its defaults: fxdeploy's (capture, cache) then the targets'."""
    defaults = Settings()
    own = {f.name: getattr(defaults, f.name) for f in dataclasses.fields(Settings)}
    return {**{n: v for n, v in own.items() if dataclasses.is_dataclass(v)}, **defaults.sections}


def leaf_fields() -> list[tuple[tuple[str, ...], Any, Any, str]]:
    """(path, type hint, default, help) for every setting that is not a table, depth first."""
    out = []
    top_docs, top_hints = field_docs(Settings), typing.get_type_hints(Settings)
    for f in dataclasses.fields(Settings):
        default = getattr(Settings(), f.name)
        if f.name != "sections" and not dataclasses.is_dataclass(default):
            out.append(((f.name,), top_hints[f.name], default, top_docs.get(f.name, "")))
    for name, table in tables().items():
        docs, hints = field_docs(type(table)), typing.get_type_hints(type(table))
        for f in dataclasses.fields(table):
            out.append(((name, f.name), hints[f.name], getattr(table, f.name), docs.get(f.name, "")))
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("settings (flags override --config, which overrides --preset)")
    group.add_argument("--preset", default="default", choices=sorted(settings_mod.PRESETS))
    group.add_argument("--config", type=existing_file, help="TOML file with the same keys as fxdeploy.Settings")
    group.add_argument("--print-settings", action="store_true", help="print the resolved settings and exit")
    for path, hint, default, doc in leaf_fields():
        flag = "--" + "-".join(path).replace("_", "-")
        help_text = f"{doc} (default: {default!r})"
        dest = "setting:" + ".".join(path)
        if hint is bool:
            group.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction,
                               default=argparse.SUPPRESS, help=help_text)
        elif typing.get_origin(hint) is Literal:
            group.add_argument(flag, dest=dest, choices=list(typing.get_args(hint)),
                               default=argparse.SUPPRESS, help=help_text)
        else:
            group.add_argument(flag, dest=dest, type=hint, default=argparse.SUPPRESS, help=help_text,
                               metavar=hint.__name__.upper())


def resolve(args: argparse.Namespace) -> Settings:
    """Preset, then ``--config``, then each flag; a value Settings refuses is a UsageError naming its flag."""
    settings = settings_mod.preset(args.preset)
    if args.config is not None:
        try:
            settings = settings_mod.merge(settings, load_config(args.config), where=str(args.config))
        except (ValueError, TypeError, RegistryError) as exc:
            raise UsageError(f"argument --config: {exc}") from exc
    overrides: dict[str, Any] = {}
    for key, value in vars(args).items():
        if key.startswith("setting:"):
            path = key.removeprefix("setting:").split(".")
            one: dict[str, Any] = {path[-1]: value}
            for table in reversed(path[:-1]):
                one = {table: one}
            try:
                settings_mod.merge(settings, one, where="command line")
            except (ValueError, TypeError) as exc:
                raise UsageError(f"argument --{'-'.join(path).replace('_', '-')}: {value!r}: {exc}") from exc
            node = overrides
            for table in path[:-1]:
                node = node.setdefault(table, {})
            node[path[-1]] = value
    return settings_mod.merge(settings, overrides, where="command line") if overrides else settings


def load_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} does not exist")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"config file {path} is not valid TOML: {exc}") from exc
    return data.get("settings", data) if isinstance(data.get("settings"), dict) else data


def render(settings: Settings) -> str:
    """The resolved settings as TOML, the format --config reads."""
    tables: list[str] = []
    top: list[str] = []
    for key, value in settings.to_dict().items():
        if isinstance(value, dict):
            rows = "\n".join(f"{k} = {_toml(v)}" for k, v in value.items())
            tables.append(f"[{key}]\n{rows}")
        else:
            top.append(f"{key} = {_toml(value)}")
    return "\n".join(top) + "\n\n" + "\n\n".join(tables) + "\n"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return json.dumps(value)
