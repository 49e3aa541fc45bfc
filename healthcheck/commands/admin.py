"""`gpu-healthcheck --list-checks | --check-config [--gres]`: what an admin asks of the package
itself (report/admin.py words both).  Neither reads the config through cli.py: --list-checks
needs none, and --check-config's job is to read it and say every error.

    code = main(args, None, started)
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    import argparse

    from ..config import Config


def main(args: "argparse.Namespace", config: Optional["Config"], started: float) -> int:
    if args.list_checks:
        from ..report.admin import list_checks

        return list_checks(args.json, sys.stdout)
    from ..report.admin import check_config

    return check_config(args.config, os.environ, args.json, sys.stdout, sys.stderr, gres=args.gres)
