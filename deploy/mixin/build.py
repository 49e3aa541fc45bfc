#!/usr/bin/env python3
"""Render the mixin (deploy/mixin/*.libsonnet) into its committed files with the jsonnet
package from PyPI: prometheus_alerts.yaml, prometheus_rules.yaml, dashboards_out/*.json.

    python deploy/mixin/build.py            # write them (`make mixin`)
    python deploy/mixin/build.py --check    # exit 1, naming them, when they differ from the source
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Dict

HERE = Path(__file__).resolve().parent
HEADER = "# Generated from deploy/mixin/*.libsonnet by `make mixin`: edit the source, not this file.\n"


def render() -> Dict[str, str]:
    """Each generated file's path (relative to deploy/mixin) and text."""
    import _jsonnet  # the PyPI package `jsonnet`

    files = json.loads(_jsonnet.evaluate_file(str(HERE / "build.jsonnet")))
    return {name: (HEADER + text + "\n" if name.endswith(".yaml") else text) for name, text in files.items()}


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
