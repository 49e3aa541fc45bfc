"""The check catalogue: small pure functions of a NodeSnapshot, each under its stable id.

    findings, crashes = run_checks(snapshot, CheckContext(config, Mode.NODE))

Checks live in one module per domain and register into one registry (`registry.CATALOGUE`);
the id is the JSON `check` field and the name used in `[checks] disabled`.  Each docstring says
what the check catches, why its threshold, and the nvidia-smi command that shows the same thing.
The import order below is the order checks run and findings are listed.  The multi-node checks
(`internode.py`) register into `registry.INTERNODE`: the fabric sweep and the gang check call
them with what their collectives concluded of each node; `--list-checks` lists them last.
"""

from __future__ import annotations

from . import node, xid, nvswitch, slurm, ecc, processes, board, fabric, network, probe, deep, deepload, deeptopo, dcgm, internode  # noqa: F401  (registration)
from .registry import CATALOGUE, INTERNODE, CheckContext, CheckCrash, CheckSpec, label, run_checks

__all__ = ["CATALOGUE", "INTERNODE", "CheckContext", "CheckCrash", "CheckSpec", "label", "run_checks"]
