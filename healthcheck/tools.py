"""Where the outside programs are: one lookup for every door (scontrol, nvidia-smi).

slurmd starts the prolog, the epilog and HealthCheckProgram with no PATH, so an unset or empty
PATH falls back to the standard directories, and a tool's config key (`scontrol`,
`nvidia_smi`) always wins.  A leaf: the prolog's entry points import it without the doors.
"""

from __future__ import annotations

import shutil
from typing import Mapping, Optional

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def find_tool(name: str, configured: Optional[str], environ: Mapping[str, str]) -> str:
    """The configured path, else `name` on PATH (or DEFAULT_PATH), else /usr/bin/NAME (whose
    absence the door then reports as its own error)."""
    if configured:
        return configured
    return shutil.which(name, path=environ.get("PATH") or DEFAULT_PATH) or f"/usr/bin/{name}"
