"""node_exporter's text format, one renderer for every textfile we write (pure): the node's
(`metrics_file`, act/metrics.py), the fabric sweep's, the gang check's and --suspects'
(report/sweep.py, report/gang.py, report/suspects.py).

    text = render([(Family("gpu_healthcheck_drains_total", "counter", "Drains ..."), [({}, 4)])])
    # HELP gpu_healthcheck_drains_total Drains ...
    # TYPE gpu_healthcheck_drains_total counter
    gpu_healthcheck_drains_total 4

A family without samples is left out; labels are sorted and escaped as the format asks.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Tuple, Union

from .records import NamedTuple

Samples = List[Tuple[Dict[str, str], Any]]  # (labels, value) of one family


class Family(NamedTuple):
    name: str
    kind: str  # gauge | counter
    help: str


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def labels_text(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape(str(v))}"' for k, v in sorted(labels.items())) + "}"


def number(value: Any) -> str:
    """A bool as 1 or 0, an int as it is, a float in full (repr)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def exact(value: float) -> Union[int, float]:
    """A figure in full, an integral one as an integer: "3", "41.2", "1795978862.5" (`:g`
    keeps six digits, which put a time stamp up to 5,000 s off)."""
    figure = float(value)
    return int(figure) if figure.is_integer() and abs(figure) < 2 ** 53 else figure


def render(families: Sequence[Tuple[Family, Sequence[Tuple[Mapping[str, str], Any]]]]) -> str:
    """The textfile: HELP and TYPE for each family with samples, then its samples."""
    lines: List[str] = []
    for family, rows in families:
        if not rows:
            continue
        lines += [f"# HELP {family.name} {family.help}", f"# TYPE {family.name} {family.kind}"]
        lines += [f"{family.name}{labels_text(labels)} {number(value)}" for labels, value in rows]
    return "\n".join(lines) + "\n"


def render_families(families: Sequence[Tuple[str, str, str, Samples]]) -> str:
    """A run's own textfile (the sweep's, the gang check's, --suspects'): (name, kind, help,
    samples) families, each figure exact."""
    return render([(Family(name, kind, text), [(labels, exact(value)) for labels, value in rows])
                   for name, kind, text, rows in families])
