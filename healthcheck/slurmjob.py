"""The one reader of Slurm's job text, `scontrol show job ID` (pure): the keys slurmctld prints
for the job, never text its user wrote.

    fields = job_fields(text, ("JobId", "NodeList", "Restarts"))   # {"JobId": "12", ...}
    admin = job_line_value(text, "AdminComment")                    # our own free text, or None

scontrol prints the user's free text verbatim, in both layouts: JobName comes right after JobId,
and Comment, WorkDir, Command and the output paths later; any of them may hold ` NodeList=gpu-a`
or a newline and a whole line of its own (Slurm 22.05 takes `sbatch -J $'x\\n   NodeList=gpu-a'`
as it is; tests/fixtures/scontrol-show-job).  Nothing in the text tells the user's words from
slurmctld's, so no position can be trusted.  But slurmctld prints each of the keys read here
exactly once for one job, and a user can only add words, never remove slurmctld's: a key seen
once is slurmctld's own; a key seen more than once is ambiguous, and refused (JobTextError naming
the key), never guessed.  So a job's name or comment can make its own job unreadable (nothing is
measured or drained for it), but can never change what is read.

`scontrol --json show job` would need none of this, but Slurm 22.05's scontrol has no `--json`
("unrecognized option"), and the layouts of the JSON differ from release to release.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, Optional


class JobTextError(ValueError):
    """`scontrol show job` text that cannot be read safely: a key missing or ambiguous."""


def _key_re(key: str) -> "re.Pattern[str]":
    # a key is a word at the start of the text or after whitespace: ReqNodeList= is no NodeList=
    return re.compile(r"(?:^|(?<=\s))" + re.escape(key) + r"=(\S*)")


def job_fields(text: str, keys: Iterable[str], optional: Iterable[str] = ()) -> Dict[str, str]:
    """{key: its value} for each of `keys` (each must be there) and of `optional` (absent when
    scontrol prints none); a value runs to the next whitespace.  Raises JobTextError when a key
    is missing, or found more than once (the job's own text holds it: module docstring)."""
    fields: Dict[str, str] = {}
    wanted = [(k, True) for k in keys] + [(k, False) for k in optional]
    for key, required in wanted:
        found = _key_re(key).findall(text)
        if len(found) > 1:
            raise JobTextError(f"scontrol show job printed {key}= {len(found)} times: the job's own "
                               f"text (its name or comment) holds {key}=, so none can be trusted")
        if found:
            fields[key] = found[0]
        elif required:
            raise JobTextError(f"scontrol show job printed no {key}=: {text[:200]!r}")
    return fields


def job_line_value(text: str, key: str) -> Optional[str]:
    """The value of a free-text key that scontrol prints on a line of its own in the several-line
    layout (AdminComment=...): the rest of that line, or None when there is no such line, or
    more than one (a name or comment with a newline and that key)."""
    values = [line.strip()[len(key) + 1:].strip() for line in text.splitlines()
              if line.strip().startswith(key + "=")]
    return (values[0] or None) if len(values) == 1 else None
