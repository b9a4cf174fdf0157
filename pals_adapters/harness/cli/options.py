"""The run options of ``pals-bench train`` (from `RunConfig`'s field metadata) and config files."""

from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing
from pathlib import Path

import yaml

from ...errors import ConfigError, PalsError
from .. import settings_yaml
from ..run_config import RunConfig


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """One option per `RunConfig` field, with its help, default and type."""
    hints = typing.get_type_hints(RunConfig)
    for f in dataclasses.fields(RunConfig):
        option = "--" + f.name.replace("_", "-")
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        kind = hints[f.name]
        if typing.get_origin(kind) in (typing.Union, types.UnionType):  # X | None -> X
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        base_type = kind
        help_text = f"{f.metadata.get('help', '')} (default: {f.metadata.get('shown_default', default)})"
        if base_type is bool:
            parser.add_argument(option, action=argparse.BooleanOptionalAction, default=default, help=help_text)
        elif typing.get_origin(base_type) is list:
            parser.add_argument(option, nargs="+", default=default, help=help_text)
        else:
            parser.add_argument(option, type=base_type, default=default, help=help_text)


def config_from_args(args: argparse.Namespace) -> RunConfig:
    return RunConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig)})


def config_file_defaults(argv: list[str] | None) -> dict:
    """Settings of ``train --config FILE``; they become defaults, so command-line options win."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    if not known.config:
        return {}
    values = _read_mapping(config_path(known.config))
    valid = {f.name for f in dataclasses.fields(RunConfig)}
    unknown = set(values) - valid
    if unknown:
        raise PalsError(f"{known.config}: unknown settings {sorted(unknown)}; valid: {sorted(valid)}")
    return values


# Settings files shipped with the package: ``--config NAME`` reads recipes/NAME.yaml unless NAME is a file.
RECIPES = Path(__file__).resolve().parents[1] / "recipes"


def config_path(name: str) -> str:
    """The settings file ``--config`` names: a file, else a recipe shipped with the package (``small-cpu``)."""
    recipe = RECIPES / f"{name}.yaml"
    if not Path(name).exists() and "/" not in name and recipe.is_file():
        return str(recipe)
    return name


def _read_mapping(path: str) -> dict:
    try:
        text = Path(path).read_text(encoding="utf-8")
        data = settings_yaml.safe_load(text) if path.endswith((".yaml", ".yml")) else json.loads(text)
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the config file ({err.strerror})") from None
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f", line {where.line + 1}" if where is not None else ""
        problem = getattr(err, "problem", None) or err
        raise ConfigError(f"{path}{line}: not valid YAML ({problem}); fix the file") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}, line {err.lineno}: not valid JSON ({err.msg}); fix the file") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings (name: value per line)")
    return data
