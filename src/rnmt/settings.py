"""Typed settings classes, the one place each default is written: a setting is a dataclass field with its
type (its annotation: bool, int, float, str, a dict, a tuple of floats, or one of them `| None`), default
(None on a type that is not nullable: none of its own, as model settings, whose defaults are each
architecture's), meaning and JSON-schema constraints; the config schema's blocks are generated from the classes
(`x-generated-from: <module>.<class>` in workflow/schemas, filled in by rnmt.config.load_schema), and a
mapping from a config or a job's JSON is checked against them with messages that name the setting."""

from __future__ import annotations

import difflib
import importlib
import re
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, Field, field, fields
from functools import cache
from typing import Any, TypeVar

from rnmt.io import InputError

T = TypeVar("T")
_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", dict: "object"}


def setting(default: Any, doc: str = "", **schema: Any) -> Any:
    """A setting: its default, what it means, and JSON-schema constraints beyond its type (the default's)."""
    return field(default=default, metadata={"doc": doc, "schema": schema})


def _config_fields(cls: type) -> list[Field[Any]]:
    """The settings a config may give (a class lists the others, set per job, in NOT_IN_CONFIG)."""
    skip = set(getattr(cls, "NOT_IN_CONFIG", ()))
    return [f for f in fields(cls) if f.name not in skip]


@cache
def _types(cls: type) -> dict[str, tuple[type, bool]]:
    """Each setting's value type and whether it may be null, from the class's annotations."""
    out = {}
    for name, hint in typing.get_type_hints(cls).items():
        args = typing.get_args(hint)
        nullable = isinstance(hint, types.UnionType) and type(None) in args
        base = next(a for a in args if a is not type(None)) if nullable else hint
        out[name] = (typing.get_origin(base) or base, nullable)
    return out


def json_schema(cls: type) -> dict[str, Any]:
    """The schema block of a settings class: each setting's type (its annotation), default, meaning and
    constraints."""
    properties: dict[str, Any] = {}
    kinds = _types(cls)
    for f in _config_fields(cls):
        assert f.default is not MISSING, f"{cls.__name__}.{f.name} has no default"
        schema = dict(f.metadata.get("schema") or {})
        base, nullable = kinds[f.name]
        if base is tuple:
            schema = {"type": "array", "items": {"type": "number"}, "minItems": len(f.default),
                      "maxItems": len(f.default), **schema}
        elif "enum" not in schema:
            schema = {"type": [_JSON_TYPES[base], "null"] if nullable else _JSON_TYPES[base], **schema}
        if f.default is not None or nullable:           # None on a type that is not nullable: no default
            schema["default"] = list(f.default) if isinstance(f.default, tuple) else f.default
        if f.metadata.get("doc"):
            schema["description"] = f.metadata["doc"]
        properties[f.name] = schema
    return {"type": "object", "additionalProperties": False, "properties": properties}


def defaults(cls: type) -> dict[str, Any]:
    """Every setting a config may give, with its default (tuples as lists, as YAML and JSON hold them)."""
    return {f.name: list(f.default) if isinstance(f.default, tuple) else f.default for f in _config_fields(cls)}


def closest(name: str, allowed: list[str]) -> list[str]:
    """The allowed name `name` most likely meant: the closest spelling, or the one its initials spell
    (learning_rate → lr); empty when none is close."""
    hint = difflib.get_close_matches(name, allowed, n=1)
    initials = "".join(w[0] for w in name.split("_") if w)
    return hint or ([initials] if len(initials) > 1 and initials in allowed else [])


def checked(cls: type[T], d: dict[str, Any], what: str, where: str = "") -> T:
    """`cls` made from a mapping: an unknown name (with the closest valid one), a value of the wrong type,
    outside an `enum` or its bounds is an InputError naming the setting (after `where`, the place it came
    from, when given)."""
    names = {f.name: f for f in fields(cls)}     # type: ignore[arg-type]
    unknown = sorted(set(d) - set(names))
    if unknown:
        # imported here: rnmt.config needs jsonschema, which a parse job's environment lacks
        hints = [f"{k} (did you mean {near[0]}?)" if (near := closest(k, sorted(names))) else k for k in unknown]
        raise InputError(f"{where}unknown {what} setting(s) {', '.join(hints)}; valid: {', '.join(sorted(names))}")
    d = dict(d)
    kinds = _types(cls)
    for k, v in d.items():                       # each setting's annotation is its type
        want, nullable = kinds[k]
        ok = ((v is None and nullable)
              or (isinstance(v, (int, float)) and not isinstance(v, bool) if want is float
                  else isinstance(v, int) and not isinstance(v, bool) if want is int
                  else isinstance(v, (list, tuple)) and len(v) == len(names[k].default) if want is tuple
                  else isinstance(v, want)))
        if not ok:
            article = f"{want.__name__} or null" if nullable else want.__name__
            raise InputError(f"{where}{what} setting {k} must be {article}, not {type(v).__name__} {v!r}")
        if want is tuple:
            d[k] = tuple(v)
        bound = _out_of_bounds(v, names[k].metadata.get("schema") or {})
        if bound:
            raise InputError(f"{where}{what} setting {k} must be {bound}, not {v!r}")
    return cls(**d)


_BOUNDS = {"minimum": (">=", lambda v, b: v >= b), "maximum": ("<=", lambda v, b: v <= b),
           "exclusiveMinimum": (">", lambda v, b: v > b), "exclusiveMaximum": ("<", lambda v, b: v < b)}


def _out_of_bounds(v: Any, schema: dict[str, Any]) -> str:
    """The constraint of `schema` (enum, bounds, pattern) that `v` breaks, said as what it must be; '' if none."""
    if v is None:
        return ""
    if "enum" in schema and v not in schema["enum"]:
        return f"one of {', '.join(map(str, schema['enum']))}"
    for key, (sign, holds) in _BOUNDS.items():
        if key in schema and isinstance(v, (int, float)) and not holds(v, schema[key]):
            return f"{sign} {schema[key]}"
    if "pattern" in schema and isinstance(v, str) and not re.fullmatch(schema["pattern"], v):
        return f"of the form {schema['pattern']}"
    return ""


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


def count(minimum: int = 0) -> Any:
    """An argparse `type` for a count option: an integer of at least `minimum` (a negative --samples or
    --last would otherwise pass and mean nothing, or something else than asked)."""
    import argparse

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below {minimum}; give a count of at least {minimum}")
        return value

    parse.__name__ = "count"
    return parse


def key_value(text: str) -> tuple[str, str]:
    """An argparse `type` for a `key=value` item (`rnmt score --meta`)."""
    import argparse

    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not key=value (e.g. run=demo)")
    return key, value


def json_object(text: str) -> dict[str, Any]:
    """An argparse `type` for a JSON object given on the command line (`--override '{"train": {...}}'`)."""
    import argparse
    import json

    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not JSON ({e})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text!r} is not a JSON object ({{...}})")
    return value


def leaves(d: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """A nested mapping's values with their key paths, (("train", "lr"), 0.002); an empty mapping is a value."""
    for k, v in d.items():
        if isinstance(v, Mapping) and v:
            yield from leaves(v, (*prefix, str(k)))
        else:
            yield (*prefix, str(k)), v

