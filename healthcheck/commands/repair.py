"""`gpu-healthcheck --repair [--gpus LIST] [--level L]`: the node pipeline (commands/node.py)
as `--node --act`, with the repair loop asked for whatever the config says (docs/repair.md):
reset GPUs or ask Slurm for a reboot, prove the node healthy with a full check, resume.

    code = main(args, config, started)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import node

if TYPE_CHECKING:
    import argparse

    from ..config import Config


def usage(args: "argparse.Namespace") -> None:
    node.usage(args)  # --gpus, as --node's


def main(args: "argparse.Namespace", config: "Config", started: float) -> int:
    from ..model import Mode

    args.node, args.act = True, True
    return node.execute(Mode.NODE, args, config, started)
