"""Validation of config.yaml and experiment files against their JSON schemas, with messages that
name the key, what is allowed there, and the closest valid spelling."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from rnmt.io import InputError
from rnmt.settings import closest


class ConfigError(InputError):
    """The configuration does not match its schema."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key written twice in one mapping (YAML keeps the last silently, so
    a row's second `model:` would drop the first's settings)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":      # `<<: *anchor` entries may be overridden
            continue
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ConfigError(f"line {key_node.start_mark.line + 1}: key {key!r} appears twice in one mapping; "
                              "merge the two into one entry")
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: file not found")
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.load(f, _UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None


def typed_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`--config` entries with their nested values typed as YAML types them.

    Snakemake reads `--config train='{max_minutes: 20}'` with YAML's base loader, which keeps every
    nested scalar a string ({'max_minutes': '20'}); top-level values it types itself. The nested
    strings are read again as a config file would read them ('20' → 20, '0.01' → 0.01, 'true' → True).
    """
    def retype(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: retype(v) for k, v in value.items()}
        if isinstance(value, list):
            return [retype(v) for v in value]
        if isinstance(value, str):
            try:
                return yaml.safe_load(value) if value.strip() else value
            except yaml.YAMLError:
                return value
        return value

    return {k: v if isinstance(v, str) else retype(v) for k, v in overrides.items()}


def _key(path: Any, root: Any = None) -> str:
    """`train.lr`; a list item that names its system shows it (`rows.3(ATR).model.hidden`)."""
    parts, node = [], root
    for p in path:
        node = node[p] if isinstance(node, (Mapping, list)) and _has(node, p) else None
        name = node.get("system") if isinstance(p, int) and isinstance(node, Mapping) else None
        parts.append(f"{p}({name})" if isinstance(name, str) else str(p))
    return ".".join(parts) or "(top level)"


def _has(node: Any, p: Any) -> bool:
    return (isinstance(node, Mapping) and p in node) or (isinstance(node, list) and isinstance(p, int)
                                                         and 0 <= p < len(node))


def _subschema(schema: Mapping[str, Any], path: Any, docs: Mapping[str, Any]) -> Mapping[str, Any]:
    node, doc = _deref(schema, schema, docs)
    for p in path:
        node, doc = _deref(node, doc, docs)
        props = node.get("properties", {})
        if isinstance(p, str) and p in props:
            node = props[p]
        elif isinstance(p, str) and isinstance(node.get("additionalProperties"), Mapping):
            node = node["additionalProperties"]
        elif isinstance(p, int) and "items" in node:
            node = node["items"]
        else:
            return {}
    return _deref(node, doc, docs)[0]


def _deref(node: Mapping[str, Any], doc: Mapping[str, Any], docs: Mapping[str, Any]
           ) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """Follow `$ref`s, "#/$defs/name" in `doc` or "<file>#/$defs/name" in a schema beside it, to the schema
    they name; returns it with the document it lies in."""
    while isinstance(node, Mapping) and isinstance(node.get("$ref"), str):
        file, _, pointer = node["$ref"].partition("#")
        if file:
            doc = docs[file]
        target: Any = doc
        for part in pointer.strip("/").split("/") if pointer.strip("/") else []:
            target = target[part]
        node = target
    return node, doc


def _describe(error: ValidationError, schema: Mapping[str, Any], docs: Mapping[str, Any], root: Any
              ) -> list[str]:
    where = _key(error.absolute_path, root)
    v, inst = error.validator, error.instance
    if v == "additionalProperties":
        allowed = sorted(_subschema(schema, error.absolute_path, docs).get("properties", {}))
        out = []
        for k in sorted(set(inst) - set(allowed)):
            full = f"{where}.{k}" if error.absolute_path else str(k)
            hint = closest(str(k), allowed)
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
        own = error.schema.get("description") if isinstance(error.schema, dict) else None
        desc = own or _subschema(schema, error.absolute_path, docs).get("description",
                                                                         f"pattern {error.validator_value}")
        if "propertyNames" in error.schema_path:
            return [f"the name {inst!r} in '{where}' is not allowed; expected {desc}"]
        return [f"'{where}' is {inst!r}; expected {desc}"]
    return [f"'{where}': {error.message}"]


def _whole_pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Any:
    """`pattern` matched against the whole string. JSON Schema's own rule is a search, and in Python's re
    `$` also matches before a final newline: "tiny\n" would pass "^[a-z]+$" and become a folder name with a
    newline in it. Every pattern here describes a whole value, so a partial match is a mismatch."""
    if isinstance(instance, str) and not re.fullmatch(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator = validators.extend(Draft202012Validator, {"pattern": _whole_pattern})


def validate(instance: Any, schema_path: str | Path, what: str) -> Any:
    """Check `instance` against the schema; raise ConfigError listing every problem in `what`."""
    schema_path = Path(schema_path)
    docs = _schemas(schema_path.parent)
    schema = docs.get(schema_path.name) or load_schema(schema_path)
    registry: Registry = Registry().with_resources(
        (name, Resource.from_contents(doc, default_specification=DRAFT202012)) for name, doc in docs.items())
    validator = _Validator(schema, registry=registry)
    errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [m for e in errors for m in _describe(e, schema, docs, instance)]
        raise ConfigError(f"{what} is invalid:\n" + "\n".join(f"  - {m}" for m in lines))
    return instance


@lru_cache(maxsize=4)
def _schemas(folder: Path) -> dict[str, Any]:
    """The schemas in `folder` by file name, which is how one refers to another ("config.schema.yaml#/...");
    read once per process (a plan validates the config and every experiment file against them)."""
    return {p.name: load_schema(p) for p in sorted(folder.glob("*.schema.yaml"))}


def _generated(name: str) -> dict[str, Any]:
    """A schema block made from the typed class that owns those settings."""
    from rnmt.settings import class_schema

    try:
        return class_schema(name)
    except InputError as e:
        raise ConfigError(str(e)) from None


def load_schema(path: str | Path) -> Any:
    """A schema file with its generated `$defs` blocks (`x-generated-from: <class>`) filled in."""
    schema = load_yaml(path)
    for key, block in (schema.get("$defs") or {}).items():
        if isinstance(block, dict) and "x-generated-from" in block:
            schema["$defs"][key] = _generated(block["x-generated-from"])
    return schema
