#!/usr/bin/env python3
"""Render the mixin (deploy/mixin/*.libsonnet) into its committed files with the jsonnet
package from PyPI: prometheus_alerts.yaml, prometheus_rules.yaml, dashboards_out/*.json.

    python deploy/mixin/build.py            # write them (`make mixin`)
    python deploy/mixin/build.py --check    # exit 1, naming them, when they differ from the source

jsonnet evaluates the mixin to plain values (build.jsonnet); this file writes them out in
the text std.manifestYamlDoc(v, quote_keys=false) and std.manifestJsonEx(v, '  ') give, byte
for byte.  Why not call those: in the C++ jsonnet (0.22) they and std.escapeStringJson are
written in jsonnet itself, one character at a time, and took 12 of the render's 13 seconds;
written out here it takes about one.  Which keys YAML may leave bare is still jsonnet's own
decision (one small call, `yaml_keys`); tests/cli/test_mixin.py holds both writers to the
real jsonnet on random values.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, List, Set

HERE = Path(__file__).resolve().parent
HEADER = "# Generated from deploy/mixin/*.libsonnet by `make mixin`: edit the source, not this file.\n"


def jsonnet_number(value: float) -> str:
    """A number as jsonnet's `'' + v` spells it: whole values in full, others in %.17g."""
    if isinstance(value, bool):
        raise TypeError("a bool is not a number here")
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        raise ValueError(f"jsonnet has no spelling for {value!r}")
    if value.is_integer():
        return "-0" if value == 0 and math.copysign(1.0, value) < 0 else str(int(value))
    return "%.17g" % value


_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def jsonnet_string(text: str) -> str:
    """std.escapeStringJson: JSON's short escapes, \\u00XX for the C0 and C1 controls and
    DEL, every other character as it is."""
    out = []
    for ch in text:
        cp = ord(ch)
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif cp < 32 or 127 <= cp <= 159:
            out.append("\\u%04x" % cp)
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _scalar(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return jsonnet_number(value)
    raise TypeError(f"cannot manifest {type(value).__name__}")


def manifest_json(value: Any, indent: str = "  ", cindent: str = "") -> str:
    """std.manifestJsonEx(value, indent)."""
    if isinstance(value, str):
        return jsonnet_string(value)
    inner = cindent + indent
    if isinstance(value, list):
        items = [inner + manifest_json(v, indent, inner) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + cindent + "]"
    if isinstance(value, dict):
        items = [inner + jsonnet_string(k) + ": " + manifest_json(value[k], indent, inner) for k in sorted(value)]
        return "{\n" + ",\n".join(items) + "\n" + cindent + "}"
    return _scalar(value)


def object_keys(value: Any) -> Set[str]:
    """Every object key anywhere in value."""
    keys: Set[str] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            keys.update(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return keys


def yaml_keys(keys: Iterable[str]) -> Dict[str, str]:
    """Each key as std.manifestYamlDoc(..., quote_keys=false) writes it (bare, or a JSON
    string), asked of jsonnet itself in one call."""
    import _jsonnet  # the PyPI package `jsonnet`

    ordered = sorted(keys)
    snippet = "[std.manifestYamlDoc({[k]: null}, quote_keys=false) for k in %s]" % json.dumps(ordered)
    lines = json.loads(_jsonnet.evaluate_snippet("yaml_keys", snippet))
    return {k: line[: -len(": null")] for k, line in zip(ordered, lines)}


def manifest_yaml(value: Any, keys: Dict[str, str], cindent: str = "") -> str:
    """std.manifestYamlDoc(value, indent_array_in_object=false, quote_keys=false), with each
    object key spelled as `keys` says (yaml_keys)."""
    if isinstance(value, str):
        if value == "":
            return '""'
        if value.endswith("\n"):
            return ("\n" + cindent + "  ").join(["|"] + value.split("\n")[:-1])
        return jsonnet_string(value)
    if isinstance(value, list):
        if not value:
            return "[]"
        parts: List[str] = []
        for item in value:
            if isinstance(item, list) and item:
                new_indent = cindent + "  "
                parts.append("-\n" + new_indent + manifest_yaml(item, keys, new_indent))
            elif isinstance(item, dict) and item:
                parts.append("- " + manifest_yaml(item, keys, cindent + "  "))
            else:
                parts.append("- " + manifest_yaml(item, keys, cindent))
        return ("\n" + cindent).join(parts)
    if isinstance(value, dict):
        if not value:
            return "{}"
        lines: List[str] = []
        for k in sorted(value):
            item = value[k]
            if isinstance(item, list) and item:
                lines.append(keys[k] + ":\n" + cindent + manifest_yaml(item, keys, cindent))
            elif isinstance(item, dict) and item:
                new_indent = cindent + "  "
                lines.append(keys[k] + ":\n" + new_indent + manifest_yaml(item, keys, new_indent))
            else:
                lines.append(keys[k] + ": " + manifest_yaml(item, keys, cindent))
        return ("\n" + cindent).join(lines)
    return _scalar(value)


def render() -> Dict[str, str]:
    """Each generated file's path (relative to deploy/mixin) and text."""
    import _jsonnet  # the PyPI package `jsonnet`

    values = json.loads(_jsonnet.evaluate_file(str(HERE / "build.jsonnet")))
    yaml_values = {n: v for n, v in values.items() if n.endswith(".yaml")}
    keys = yaml_keys(object_keys(list(yaml_values.values())))
    files = {n: HEADER + manifest_yaml(v, keys) + "\n" for n, v in yaml_values.items()}
    files.update({n: manifest_json(v) + "\n" for n, v in values.items() if n not in yaml_values})
    return files


def main(argv: list) -> int:
    files = render()
    if "--check" in argv:
        stale = [n for n, t in files.items() if not (HERE / n).is_file() or (HERE / n).read_text() != t]
        stale += [str(p.relative_to(HERE)) for p in (HERE / "dashboards_out").glob("*.json")
                  if str(p.relative_to(HERE)) not in files]
        for name in stale:
            print(f"deploy/mixin/{name} differs from the mixin's source: run `make mixin`", file=sys.stderr)
        return 1 if stale else 0
    (HERE / "dashboards_out").mkdir(exist_ok=True)
    for old in (HERE / "dashboards_out").glob("*.json"):
        if str(old.relative_to(HERE)) not in files:
            old.unlink()
    for name, text in files.items():
        (HERE / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
