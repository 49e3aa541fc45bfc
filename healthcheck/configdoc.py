"""The config's key reference, written from the schema (configschema.KEYS) for the docs.

    reference_rows()        -> [Row("dcgm.timeout_s", "float", "1800", "0.1 to 14400 seconds", doc, see)]
    markdown_reference()    -> the tables between the markers of docs/configuration.md
    with_reference(text)    -> docs/configuration.md's text with its tables regenerated

docs/make-configdoc rewrites docs/configuration.md, docs/make-manpage puts the same rows in
gpu-healthcheck(8)'s FILES section, and tests/unit/test_configschema.py keeps both equal to the
schema.  Nothing on a node's path imports this module.
"""

from __future__ import annotations

import json
from typing import Any, List, Mapping, NamedTuple

from .config import type_name
from .configschema import ALIASES, KEYS, SECTIONS, Key, section_of

BEGIN = "<!-- BEGIN key reference: generated from healthcheck/configschema.py by docs/make-configdoc -->"
END = "<!-- END key reference -->"


class Row(NamedTuple):
    key: str
    type: str
    default: str
    bounds: str
    doc: str
    see: str


def toml_value(value: Any) -> str:
    """A value as it would be written in config.toml."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def _number(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e7 or value != int(value) else str(int(value))


def bounds(key: Key) -> str:
    """What values the key takes beyond its type: "0.1 to 3600 seconds", ">= 0 MiB", choices."""
    if key.choices:
        return ("each one of " if key.type == "list" else "") + ", ".join(key.choices)
    if key.low is None:
        return ""
    unit = f" ({key.unit})" if " " in key.unit else f" {key.unit}" if key.unit else ""
    if key.high is None:
        return f">= {_number(key.low)}{unit}"
    return f"{_number(key.low)} to {_number(key.high)}{unit}"


def reference_rows() -> List[Row]:
    """Every key in the schema's order, its type in the words the loader's errors use."""
    rows = []
    for path, key in KEYS.items():
        default = toml_value(key.default) if key.default is not None else (
            f"unset: {key.unset}" if key.unset else "unset")
        rows.append(Row(path, type_name(key), default, bounds(key), key.doc, key.see))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_reference(aliases: Mapping[str, str] = ALIASES) -> str:
    """One table per section, in the schema's order, then the old names still read."""
    out: List[str] = []
    rows = reference_rows()
    for section, what in SECTIONS.items():
        title = "Top level" if not section else f"`[{section}]`"
        out += [f"### {title}", "", what[0].upper() + what[1:] + ".", "",
                "| key | type | default | bounds | meaning |", "|---|---|---|---|---|"]
        for row in rows:
            if section_of(row.key) != section:
                continue
            doc = row.doc + (f" ([more]({row.see}))" if row.see else "")
            default = f"`{row.default}`" if not row.default.startswith("unset") else row.default
            out.append(f"| `{row.key}` | {_cell(row.type)} | {_cell(default)} | "
                       f"{_cell(row.bounds)} | {_cell(doc)} |")
        out.append("")
    if aliases:
        out += ["### Old names", "", "Still read as the names they have now, each use with a warning on stderr (and among "
                "--check-config's warnings); deprecated: use the new name.  A file that gives an old "
                "name and its new one both is an error.", "",
                "| old name | name now |", "|---|---|"]
        out += [f"| `{old}` | `{new}` |" for old, new in sorted(aliases.items())]
        out.append("")
    return "\n".join(out)


def with_reference(text: str) -> str:
    """The text with what stands between BEGIN and END replaced by markdown_reference().

    Raises:
        ValueError: the text lacks the markers.
    """
    head, begin, rest = text.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"the markers {BEGIN!r} and {END!r} are missing")
    return f"{head}{BEGIN}\n\n{markdown_reference()}\n{END}{tail}"
