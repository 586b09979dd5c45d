"""Validation of config.yaml and experiment files against their JSON schemas, with messages that
name the key, what is allowed there, and the closest valid spelling."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from rnmt.io import InputError


class ConfigError(InputError):
    """The configuration does not match its schema."""


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: file not found")
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None


def _key(path: Any) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def _subschema(schema: Mapping[str, Any], path: Any) -> Mapping[str, Any]:
    node: Mapping[str, Any] = _deref(schema, schema)
    for p in path:
        node = _deref(node, schema)
        props = node.get("properties", {})
        if isinstance(p, str) and p in props:
            node = props[p]
        elif isinstance(p, str) and isinstance(node.get("additionalProperties"), Mapping):
            node = node["additionalProperties"]
        elif isinstance(p, int) and "items" in node:
            node = node["items"]
        else:
            return {}
    return _deref(node, schema)


def _deref(node: Mapping[str, Any], schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """Follow a local `$ref` ("#/$defs/name") to the schema it names."""
    while isinstance(node, Mapping) and isinstance(node.get("$ref"), str) and node["$ref"].startswith("#/"):
        target: Any = schema
        for part in node["$ref"][2:].split("/"):
            target = target[part]
        node = target
    return node


def _describe(error: ValidationError, schema: Mapping[str, Any]) -> list[str]:
    where = _key(error.absolute_path)
    v, inst = error.validator, error.instance
    if v == "additionalProperties":
        allowed = sorted(_subschema(schema, error.absolute_path).get("properties", {}))
        out = []
        for k in sorted(set(inst) - set(allowed)):
            full = f"{where}.{k}" if error.absolute_path else str(k)
            hint = difflib.get_close_matches(str(k), allowed, n=1)
            out.append(f"unknown key '{full}'" + (f" (did you mean '{hint[0]}'?)" if hint else "")
                       + f"; allowed keys here: {', '.join(allowed)}")
        return out
    if v == "type":
        return [f"'{where}' must be of type {error.validator_value}, got {type(inst).__name__} {inst!r}"]
    if v == "enum":
        return [f"'{where}' is {inst!r}; allowed values: {', '.join(map(str, error.validator_value))}"]
    if v == "required":
        missing = [k for k in error.validator_value if k not in inst]
        return [f"missing key '{where}.{k}'" if error.absolute_path else f"missing key '{k}'" for k in missing]
    if v == "pattern":
        desc = _subschema(schema, error.absolute_path).get("description", f"pattern {error.validator_value}")
        return [f"'{where}' is {inst!r}; expected {desc}"]
    return [f"'{where}': {error.message}"]


def validate(instance: Any, schema_path: str | Path, what: str) -> Any:
    """Check `instance` against the schema; raise ConfigError listing every problem in `what`."""
    schema = load_yaml(schema_path)
    errors = sorted(Draft202012Validator(schema).iter_errors(instance), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [m for e in errors for m in _describe(e, schema)]
        raise ConfigError(f"{what} is invalid:\n" + "\n".join(f"  - {m}" for m in lines))
    return instance
