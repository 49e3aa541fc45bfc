"""A fabric job's output (pure: text in), split at the markers its script echoes
(decide/internodejob.job_script) into one JobSection per program, each read by its own parser.

    sections = read_job_output(text)     # {"collective" | rail name: JobSection}
    sections["collective"].nccl          # NcclRun (read/nccltests.py)
    sections["mlx5_0"].ib                # IbRun (read/perftest.py)
    sections["collective"].rc            # its exit status; None: it never ended
    sections["collective"].missing       # "all_reduce_perf": slurmstepd said it is not there

    == gpu-healthcheck collective begin
    ...nccl-tests' output...
    == gpu-healthcheck collective rc=0
    == gpu-healthcheck rail mlx5_0 begin
    ...ib_write_bw's output...
    == gpu-healthcheck rail mlx5_0 rc=0
    == gpu-healthcheck end
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

from ..netmodel import MARK, IbRun, JobSection, NcclRun
from .nccltests import parse_nccl_tests
from .perftest import parse_ib_write_bw

_MARK_RE = re.compile(r"^" + re.escape(MARK) + r" (collective|rail (\S+)) (begin|rc=(\d+))\s*$")
# What srun, slurmstepd or a shell print when the program is not there (Slurm 22.05-24.11:
# "slurmstepd: error: execve(): all_reduce_perf: No such file or directory").
_MISSING_RE = re.compile(r"execve\(\): (\S+): No such file or directory|(\S+): (?:command )?not found$",
                         re.M)


def split_output(text: str) -> Dict[str, Tuple[str, Optional[int]]]:
    """{"collective" | rail name: (its output, its exit status or None when it never ended)}."""
    sections: Dict[str, Tuple[List[str], Optional[int]]] = {}
    current: Optional[str] = None
    for line in text.splitlines():
        m = _MARK_RE.match(line)
        if m is None:
            if current is not None:
                sections[current][0].append(line)
            continue
        name = m.group(2) or "collective"
        if m.group(3) == "begin":
            sections[name] = ([], None)
            current = name
        elif name in sections:
            sections[name] = (sections[name][0], int(m.group(4)))
            current = None
    return {name: ("\n".join(body), rc) for name, (body, rc) in sections.items()}


def missing_program(text: str) -> Optional[str]:
    m = _MISSING_RE.search(text)
    return (m.group(1) or m.group(2)) if m else None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"


def read_job_output(text: str) -> Dict[str, JobSection]:
    """The job's output file -> {"collective" | rail name: JobSection}; a program whose markers
    are absent has no entry."""
    return {name: JobSection(rc, missing_program(body), _last_line(body),
                             parse_nccl_tests(body) if name == "collective" else NcclRun(),
                             parse_ib_write_bw(body) if name != "collective" else IbRun())
            for name, (body, rc) in split_output(text).items()}
