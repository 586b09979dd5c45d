"""Typed settings classes, the one place each default is written: a setting is a dataclass field with its
default, meaning and JSON-schema constraints; the config schema's blocks are generated from the classes
(`x-generated-from: <module>.<class>` in workflow/schemas, filled in by rnmt.config.load_schema), and a
mapping from a config or a job's JSON is checked against them with messages that name the setting."""

from __future__ import annotations

import importlib
from dataclasses import MISSING, Field, field, fields
from typing import Any, TypeVar

from rnmt.io import InputError

T = TypeVar("T")
_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}


def setting(default: Any, doc: str = "", **schema: Any) -> Any:
    """A setting: its default, what it means, and JSON-schema constraints beyond its type (the default's)."""
    return field(default=default, metadata={"doc": doc, "schema": schema})


def _config_fields(cls: type) -> list[Field[Any]]:
    """The settings a config may give (a class lists the others, set per job, in NOT_IN_CONFIG)."""
    skip = set(getattr(cls, "NOT_IN_CONFIG", ()))
    return [f for f in fields(cls) if f.name not in skip]


def json_schema(cls: type) -> dict[str, Any]:
    """The schema block of a settings class: each setting's type (its default's), default, meaning and
    constraints."""
    properties: dict[str, Any] = {}
    for f in _config_fields(cls):
        assert f.default is not MISSING, f"{cls.__name__}.{f.name} has no default"
        schema = dict(f.metadata.get("schema") or {})
        if isinstance(f.default, tuple):
            schema = {"type": "array", "items": {"type": "number"}, "minItems": len(f.default),
                      "maxItems": len(f.default), **schema}
        elif "enum" not in schema:
            schema = {"type": _JSON_TYPES[type(f.default)], **schema}
        schema["default"] = list(f.default) if isinstance(f.default, tuple) else f.default
        if f.metadata.get("doc"):
            schema["description"] = f.metadata["doc"]
        properties[f.name] = schema
    return {"type": "object", "additionalProperties": False, "properties": properties}


def defaults(cls: type) -> dict[str, Any]:
    """Every setting a config may give, with its default (tuples as lists, as YAML and JSON hold them)."""
    return {f.name: list(f.default) if isinstance(f.default, tuple) else f.default for f in _config_fields(cls)}


def checked(cls: type[T], d: dict[str, Any], what: str) -> T:
    """`cls` made from a mapping: an unknown name (with the closest valid one), a value of the wrong type or
    outside an `enum` is an InputError naming the setting."""
    names = {f.name: f for f in fields(cls)}     # type: ignore[arg-type]
    unknown = sorted(set(d) - set(names))
    if unknown:
        # imported here: rnmt.config needs jsonschema, which a parse job's environment lacks
        from rnmt.config import closest

        hints = [f"{k} (did you mean {near[0]}?)" if (near := closest(k, sorted(names))) else k for k in unknown]
        raise InputError(f"unknown {what} setting(s) {', '.join(hints)}; valid: {', '.join(sorted(names))}")
    d = dict(d)
    for k, v in d.items():                       # the type of each default is the setting's type
        want = type(names[k].default)
        ok = (isinstance(v, (int, float)) and not isinstance(v, bool) if want is float
              else isinstance(v, int) and not isinstance(v, bool) if want is int
              else isinstance(v, (list, tuple)) and len(v) == len(names[k].default) if want is tuple
              else isinstance(v, want))
        if not ok:
            raise InputError(f"{what} setting {k} must be {want.__name__}, not {type(v).__name__} {v!r}")
        if want is tuple:
            d[k] = tuple(v)
        enum = (names[k].metadata.get("schema") or {}).get("enum")
        if enum and v not in enum:
            raise InputError(f"{what} setting {k} must be one of {', '.join(map(str, enum))}, not {v!r}")
    return cls(**d)


def class_schema(name: str) -> dict[str, Any]:
    """The schema block for `x-generated-from: name`: of the settings class `module.Class`, or what the
    function `module.function` returns."""
    module, _, cls = name.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError, ValueError):
        raise InputError(f"schema: x-generated-from names {name!r}, which is not a settings class or a schema "
                         "function") from None
    return json_schema(found) if isinstance(found, type) else found()
