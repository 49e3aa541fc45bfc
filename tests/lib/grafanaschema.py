"""Grafana's dashboard schema, from PyPI's grafana-foundation-sdk: its models are generated
from Grafana's own schema (each field with its type, enums as enums), and each has a
`from_json` decoder.  The decoder checks nothing itself (it copies what it knows and drops the
rest), so the check is two walks over what it decoded:

    problems = schema_problems(json.loads(text))   # [] when the dashboard fits the schema

- every field the schema has holds what the schema says (a string, an int, one of an enum's
  values, a list of models, ...), down through panels, their options and field config (the
  SDK's panel plugins), targets (its Prometheus query) and variables;
- no key is lost on a decode and encode round trip (a key the schema does not have), except
  those Grafana itself writes outside its schema (OUTSIDE_SCHEMA).

Grafana itself is not in Debian, so this is as close to loading the dashboards in Grafana as
the suite gets; tests/cli/test_mixin.py runs it when the package is installed.
"""

from __future__ import annotations

import enum
import json
import re
import typing
from typing import Any, List

# Keys Grafana writes in a dashboard's JSON that its schema does not model: the query
# variable's `definition` (the editor's text of the query), the built-in annotation's
# `builtIn`, and the Prometheus data source's annotation fields (its annotation editor's).
OUTSIDE_SCHEMA = {
    "templating.list[].definition",
    "annotations.list[].builtIn",
    "annotations.list[].step",
    "annotations.list[].titleFormat",
    "annotations.list[].textFormat",
    "annotations.list[].useValueForTime",
}
_MODELS = "grafana_foundation_sdk.models"


def schema_problems(doc: dict) -> List[str]:
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()  # the panel and query types the SDK knows
    try:
        decoded = Dashboard.from_json(doc)
    except (KeyError, TypeError, AttributeError) as exc:
        return [f"the SDK cannot decode it: {type(exc).__name__}: {exc}"]
    problems = type_problems(decoded, Dashboard, "")
    back = json.loads(json.dumps(decoded, cls=JSONEncoder))
    problems += [f"{path}: not in Grafana's schema" for path in lost_keys(doc, back, "")
                 if re.sub(r"\[\d+\]", "[]", path) not in OUTSIDE_SCHEMA]
    return problems


def type_problems(obj: Any, hint: Any, path: str) -> List[str]:
    """Where `obj` (a decoded model, or a JSON value under one) is not of the schema's type."""
    if type(obj).__module__.startswith(_MODELS) and not isinstance(obj, enum.Enum):
        found = []
        if isinstance(hint, type) and not isinstance(obj, hint):
            found.append(f"{path}: a {type(obj).__name__}, where the schema has {hint.__name__}")
        for name, field in typing.get_type_hints(type(obj)).items():
            found += type_problems(getattr(obj, name, None), field, f"{path}.{name}")
        return found
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any or hint is object:
        return []
    if origin is typing.Union:
        if obj is None and type(None) in args:
            return []
        tries = [type_problems(obj, a, path) for a in args if a is not type(None)]
        return [] if not all(tries) else min(tries, key=len)  # the nearest alternative's
    if origin is typing.Literal:
        return [] if obj in args else [f"{path}: {obj!r} is not one of {list(args)}"]
    if origin is list:
        if not isinstance(obj, list):
            return [f"{path}: {obj!r:.60} is not a list"]
        return [p for i, item in enumerate(obj) for p in type_problems(item, args[0] if args else Any, f"{path}[{i}]")]
    if origin is dict:
        if not isinstance(obj, dict):
            return [f"{path}: {obj!r:.60} is not an object"]
        return [p for k, v in obj.items() for p in type_problems(v, args[1] if args else Any, f"{path}.{k}")]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        values = [m.value for m in hint]
        return [] if isinstance(obj, hint) or obj in values else [f"{path}: {obj!r} is not one of {values}"]
    if hint in (bool, int, float, str):
        ok = (isinstance(obj, bool) if hint is bool else
              isinstance(obj, str) if hint is str else
              isinstance(obj, (int, float) if hint is float else int) and not isinstance(obj, bool))
        return [] if ok else [f"{path}: {obj!r:.60} is not {'an' if hint is int else 'a'} {hint.__name__}"]
    if isinstance(hint, type) and isinstance(obj, dict) and hasattr(hint, "from_json"):
        # a field the SDK's decoder leaves as plain JSON (a panel's transformations)
        return type_problems(hint.from_json(obj), hint, path)
    if isinstance(hint, type):
        return [] if isinstance(obj, hint) else [f"{path}: {obj!r:.60} is not a {hint.__name__}"]
    return [f"{path}: no check for the schema's type {hint}"]


def lost_keys(ours: Any, back: Any, path: str) -> List[str]:
    """The keys of `ours` that the round trip dropped (JSON paths)."""
    if isinstance(ours, dict) and isinstance(back, dict):
        prefix = f"{path}." if path else ""
        return [p for k, v in ours.items()
                for p in ([prefix + k] if k not in back else lost_keys(v, back[k], prefix + k))]
    if isinstance(ours, list) and isinstance(back, list) and len(ours) == len(back):
        return [p for i, (a, b) in enumerate(zip(ours, back)) for p in lost_keys(a, b, f"{path}[{i}]")]
    return []
