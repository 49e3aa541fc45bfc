"""The one door to NVIDIA's nvidia-smi: by absolute path (config `nvidia_smi`), with a deadline.

    smi = NvidiaSmi(find_nvidia_smi(config.nvidia_smi, os.environ), config.nvidia_smi_timeout_s)
    done = smi.reset([2])        # `nvidia-smi --gpu-reset -i 2`
    done.ok, done.message        # the driver's own words, success or refusal

nvidia-smi refuses a reset while any process holds the GPU (its message, seen in
NVIDIA/NVSentinel#1690: "In use by another client ... Please first kill all processes using this
device", exit 255); that message is handed back as it is, for the log.  Persistence mode counts
as such a client: in the same thread the refusal was lifted by `nvidia-smi -pm 0 -i <uuid>`
alone, so the repair turns it off for the reset and back on after (act.repair).  Which GPUs
must be reset together on an NVSwitch system is decided before we get here
(decide.repair.NVSWITCH_WHY).
"""

from __future__ import annotations

import time
from typing import Mapping, Optional, Sequence

from ..records import NamedTuple
from ..tools import find_tool


class SmiResult(NamedTuple):
    ok: bool
    message: str  # nvidia-smi's output (stdout + stderr), trimmed; or why it did not run
    argv: Sequence[str] = ()


def find_nvidia_smi(configured: Optional[str], environ: Mapping[str, str]) -> str:
    return find_tool("nvidia-smi", configured, environ)


# what we keep of nvidia-smi's answer to a reset or -pm (a few lines; 2000 characters are logged)
SMI_CAP_BYTES = 1 << 20


# what a call needs at the least; with less left of the run's budget it is not started
MIN_CALL_S = 1.0


class NvidiaSmi:
    def __init__(self, path: str, timeout_s: float, ends_at: Optional[float] = None) -> None:
        """`timeout_s`: one call's deadline (nvidia_smi_timeout_s, fitted to the run's budget by
        decide.budget.fit_to_budget); `ends_at`: the run's own deadline (time.monotonic()),
        which no call outlasts."""
        self.path = path
        self.timeout_s = timeout_s
        self.ends_at = ends_at

    def reset(self, gpus: Sequence[int]) -> SmiResult:
        """`nvidia-smi --gpu-reset -i N[,N...]`; an empty list resets every GPU."""
        args = ["--gpu-reset"] + (["-i", ",".join(str(g) for g in gpus)] if gpus else [])
        return self._run(args)

    def persistence(self, gpus: Sequence[int], enabled: bool) -> SmiResult:
        """`nvidia-smi -pm 0|1 -i N[,N...]`: persistence mode of these GPUs (never all: an empty
        list changes nothing)."""
        if not gpus:
            return SmiResult(True, "no GPU named: nothing changed")
        return self._run(["-pm", "1" if enabled else "0", "-i", ",".join(str(g) for g in gpus)])

    def _run(self, args: Sequence[str]) -> SmiResult:
        from ..outside import run_bounded

        argv = [self.path, *args]
        timeout_s, bound = self.timeout_s, "nvidia_smi_timeout_s"
        if self.ends_at is not None:
            left = self.ends_at - time.monotonic() - MIN_CALL_S  # room to log what happened
            if left < timeout_s:
                timeout_s, bound = left, "what is left of the run's budget, act_budget_s"
            if timeout_s < MIN_CALL_S:
                return SmiResult(False, f"{' '.join(argv)}: not run, the run's budget "
                                        f"(act_budget_s) is spent", argv)
        ran = run_bounded(argv, timeout_s, cap_bytes=SMI_CAP_BYTES, term_grace_s=2.0,
                          merge_stderr=True)
        if ran.timed_out:
            return SmiResult(False, f"{' '.join(argv)}: no answer within {timeout_s:.3g} s "
                                    f"({bound})", argv)
        if ran.error:
            return SmiResult(False, f"{ran.error} (config key nvidia_smi)", argv)
        text = " ".join(ran.text().split())[:2000]
        if ran.returncode != 0:
            return SmiResult(False, f"exit status {ran.returncode}: {text}", argv)
        return SmiResult(True, text, argv)
