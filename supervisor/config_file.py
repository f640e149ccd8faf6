"""`frontend-supervisor --config FILE`: a YAML file of command-line flags.

The keys are the flags' names without the dashes (`workers: 4`, `max-model-len: 16384`,
`max_model_len` works too), with `model:` for the positional model; any flag the command line
takes is allowed, vLLM engine flags included (they are forwarded to the engine as on the
command line). Values: a scalar is the flag's value, a list gives several values
(`served-model-name: [a, b]`, `api-key: [k1, k2]`), `true` sets a switch, `false` writes the
`--no-` form where the flag has one and is otherwise left out, a mapping is passed as JSON
(vLLM's dict-valued flags), `null` is left out.

The command line wins: the file's flags are placed before the command line's, and for a flag
given in both, argparse (and vLLM's engine parser, for forwarded flags) keeps the last value.
A model on the command line replaces the file's `model` (write it before any multi-value flag:
after `--served-model-name a b`, as in argparse, a bare word is one more value). The file is the place for secrets:
`api-key` there never shows up in a process listing.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

CONFIG_FLAG = "--config"


class ConfigFileError(ValueError):
    pass


def extract_config_path(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """(path of --config, argv without it). Only the first `--config` is taken."""
    rest: list[str] = []
    path: str | None = None
    tokens = list(argv)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "--":
            rest.extend(tokens[i:])
            break
        if path is None and token == CONFIG_FLAG:
            if i + 1 >= len(tokens):
                raise ConfigFileError("--config needs a file path")
            path = tokens[i + 1]
            i += 2
            continue
        if path is None and token.startswith(CONFIG_FLAG + "="):
            path = token.split("=", 1)[1]
            i += 1
            continue
        rest.append(token)
        i += 1
    return path, rest


def load_config(path: str) -> dict[str, Any]:
    import yaml  # only with --config

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise ConfigFileError(f"cannot read config file {path}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigFileError(f"config file {path} is not valid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigFileError(f"config file {path} must be a mapping of flag names to values")
    return data


def config_to_argv(config: dict[str, Any], parser: argparse.ArgumentParser) -> tuple[str | None, list[str]]:
    """(model, flag tokens) for the file's contents."""
    own = parser._option_string_actions
    model: str | None = None
    tokens: list[str] = []
    for raw_key, value in config.items():
        key = str(raw_key).lstrip("-").replace("_", "-")
        if key == "config":
            raise ConfigFileError("a config file cannot name another config file")
        if key == "model":
            if value is not None:
                model = str(value)
            continue
        flag = "--" + key
        if value is None:
            continue
        if isinstance(value, bool):
            if value:
                tokens.append(flag)
            elif "--no-" + key in own:
                tokens.append("--no-" + key)
            continue
        if isinstance(value, (list, tuple)):
            if not value:
                continue
            tokens.append(flag)
            tokens.extend(_scalar(v, key) for v in value)
            continue
        if isinstance(value, dict):
            tokens += [flag, json.dumps(value)]
            continue
        tokens += [flag, _scalar(value, key)]
    return model, tokens


def _scalar(value: Any, key: str) -> str:
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise ConfigFileError(f"config key {key!r}: unsupported value {value!r}")


def split_with_config(
    argv: Sequence[str],
    parser: argparse.ArgumentParser,
    split_argv,
) -> tuple[list[str], str | None, list[str]]:
    """`split_argv` over the config file's flags followed by the command line's.

    Both are split separately (so a multi-value flag at the end of one cannot swallow the
    other's positional model) and concatenated, the command line last.
    """
    try:
        path, rest = extract_config_path(argv)
        cli_own, cli_model, cli_fwd = split_argv(rest, parser)
        if path is None:
            return cli_own, cli_model, cli_fwd
        file_model, tokens = config_to_argv(load_config(path), parser)
    except ConfigFileError as e:
        parser.error(str(e))
    # A placeholder model first: the file has no positional, and split_argv must not guess one
    # from the values of a trailing multi-value flag.
    file_own, _, file_fwd = split_argv([_PLACEHOLDER_MODEL, *tokens], parser)
    if file_model is not None and cli_model is not None:
        # `--served-model-name a b` with no positional: split_argv took `b` for the model (what
        # vLLM does without a file); with the file naming the model, `b` is a name after all.
        try:
            cli_own, _, cli_fwd = split_argv([_PLACEHOLDER_MODEL, *rest], _NoPositionalProbe(parser))
            cli_model = None
        except _HasPositional:
            pass
    return file_own + cli_own, cli_model if cli_model is not None else file_model, file_fwd + cli_fwd


_PLACEHOLDER_MODEL = "<config-file>"


class _HasPositional(Exception):
    pass


class _NoPositionalProbe:
    """The parser's flag table for split_argv; a second positional raises instead of exiting."""

    def __init__(self, parser: argparse.ArgumentParser):
        self._option_string_actions = parser._option_string_actions

    def error(self, message: str):
        raise _HasPositional(message)
