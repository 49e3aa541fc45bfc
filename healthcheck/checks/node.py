"""Node-wide checks: the driver, the GPU count, GPUs that NVML has lost."""

from __future__ import annotations

from typing import Iterator

from ..model import Action, Finding, GpuSnapshot, NodeSnapshot, Severity
from .registry import CheckContext, finding as _f, gpu_check, label, node_check


@node_check("nvml.init", severity=Severity.FAIL, action=Action.DRAIN)
def check_nvml_init(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """NVML could not initialise: the driver is not loaded, or library and kernel module differ.

    Either way no job can use the GPUs, so it is a node fault (drain), except where the library
    is absent and sysfs lists no NVIDIA device: a node without GPUs is healthy.
    nvidia-smi equivalent: `nvidia-smi` printing "couldn't communicate with the NVIDIA driver".
    """
    error = node.nvml_error
    if error is None:
        return
    if error == "LIBRARY_NOT_FOUND":
        if node.sysfs_gpus == ():
            yield _f("nvml.init", Severity.INFO, None,
                     "no GPUs: libnvidia-ml.so.1 is absent and sysfs lists no NVIDIA device",
                     value=error)
            return
        if node.sysfs_gpus is None:
            yield _f("nvml.init", Severity.UNKNOWN, None,
                     f"libnvidia-ml.so.1 is absent and sysfs could not be read "
                     f"({node.sysfs_error}): cannot tell whether this node has GPUs", value=error)
            return
        yield _f("nvml.init", Severity.FAIL, None,
                 f"libnvidia-ml.so.1 is absent but sysfs lists {len(node.sysfs_gpus)} NVIDIA "
                 f"GPU(s): install the driver", value=error, action=Action.DRAIN)
        return
    action = Action.REBOOT if error == "LIB_RM_VERSION_MISMATCH" else Action.DRAIN
    hint = ("the driver library and kernel module versions differ: reboot"
            if action is Action.REBOOT else "check the NVIDIA driver (dmesg, nvidia-smi)")
    yield _f("nvml.init", Severity.FAIL, None, f"NVML failed to initialise: {error}; {hint}",
             value=error, action=action)


@node_check("gpu.count", severity=Severity.FAIL, action=Action.REBOOT,
            threshold_key="expected_gpus")
def check_gpu_count(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Fewer GPUs than the node should have: one fell off the bus, or was never initialised.

    sysfs listing more NVIDIA GPUs than NVML reports means a GPU the driver lost (fail: reboot).
    NVML reporting more than sysfs is no fault (simulated GPUs have no PCI device).  With
    `expected_gpus` set, fewer GPUs in NVML fail; more only warn.  A GPU an earlier run listed
    and NVML lists no more is named by its PCI address and serial (NodeSnapshot.missing_gpus).
    nvidia-smi equivalent: `nvidia-smi -L | wc -l` against `lspci -d 10de: | wc -l`.
    """
    if node.nvml_error is not None:
        return
    count = len(node.gpus)
    # a function bound to vfio-pci, to no driver, or excluded with NVreg_ExcludedGpus is one
    # the admin gave away: NVML cannot see it, and it is no lost GPU
    bound = len(node.sysfs_gpus or ()) - len(node.sysfs_unbound)
    for address, driver in node.sysfs_unbound:
        yield _f("gpu.count", Severity.INFO, None,
                 f"NVIDIA GPU {address} is bound to {driver}, not nvidia: not counted", value=driver)
    expected = ctx.config.expected_gpus
    by_sysfs = bound - count if node.sysfs_gpus is not None and bound > count else 0
    by_config = expected - count if expected is not None and count < expected else 0
    # the GPUs an earlier run listed that NVML lists no more are named, so that the drain
    # reason, the repair's ledger and an RMA are that board's, never GPU 0's
    named = node.missing_gpus[:max(by_sysfs, by_config)]
    for gone in named:
        limit = f"expected {expected}" if by_config >= by_sysfs else f"sysfs lists {bound} bound to nvidia"
        yield Finding("gpu.count", Severity.FAIL,
                      f"NVML reports {count} GPUs, {limit}: {_was(gone)} is missing (fell off the "
                      f"bus); reboot (power-cycle) the node and check that GPU", value=count,
                      threshold=expected if by_config >= by_sysfs else bound, action=Action.REBOOT,
                      pci=gone.pci_bus_id, serial=gone.serial)
    if by_sysfs > len(named):
        yield _f("gpu.count", Severity.FAIL, None,
                 f"sysfs lists {bound} NVIDIA GPUs bound to nvidia but NVML reports {count}: a GPU "
                 f"fell off the bus; reboot (power-cycle) the node", value=count,
                 threshold=bound, action=Action.REBOOT)
    if by_config > len(named):
        yield _f("gpu.count", Severity.FAIL, None,
                 f"NVML reports {count} GPUs, expected {expected}: a GPU is missing; reboot the "
                 f"node and check the GPUs", value=count, threshold=expected, action=Action.REBOOT)
    if expected is not None and count > expected:
        yield _f("gpu.count", Severity.WARN, None,
                 f"NVML reports {count} GPUs, more than expected_gpus = {expected}: fix the "
                 f"config", value=count, threshold=expected)


def _was(gone: GpuSnapshot) -> str:
    """A GPU NVML no longer lists, as an earlier run knew it."""
    who = f"SN {gone.serial}" if gone.serial else gone.uuid or "serial unknown"
    return f"the GPU at {gone.pci_bus_id} ({who}; GPU {gone.index} when last listed)"


@gpu_check("gpu.lost", severity=Severity.FAIL, action=Action.REBOOT,
           threshold_key="nvml_timeout_s")
def check_gpu_lost(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """NVML answers GPU_IS_LOST, RESET_REQUIRED or UNKNOWN for this GPU, or its calls hang.

    The GPU cannot run a job until it is reset (often only a reboot brings it back).
    nvidia-smi equivalent: "Unable to determine the device handle for GPU ...: GPU is lost".
    """
    if gpu.lost is None:
        return
    if gpu.lost == "TIMEOUT":
        message = (f"{label(gpu)}: NVML calls did not return within "
                   f"{ctx.config.nvml_timeout_s:g} s; reset the GPU or reboot")
    else:
        message = f"{label(gpu)}: NVML reports {gpu.lost}; reset the GPU or reboot the node"
    yield _f("gpu.lost", Severity.FAIL, gpu, message, value=gpu.lost,
             action=Action.REBOOT if gpu.lost == "GPU_IS_LOST" else Action.RESET)


CORRUPTED_INFOROM = "CORRUPTED_INFOROM"


@gpu_check("nvml.query", severity=Severity.FAIL, action=Action.DRAIN)
def check_nvml_query(gpu: GpuSnapshot, node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """An NVML query that failed on this GPU with an error other than "not supported".

    The field it reads (ECC counters, remapped rows, memory, processes, ...) is then not
    known, and a check that finds it None would pass the GPU: say so instead (unknown, never a
    drain).  CORRUPTED_INFOROM is a fault of its own: the InfoROM holds the board's ECC and
    page-retirement records, and nvml.h documents the error as "infoROM is corrupted";
    nvidia-smi prints "WARNING: infoROM is corrupted at gpu ...".  NVIDIA's remedy is a person:
    reflash the InfoROM, else RMA.  Fail, drain.
    nvidia-smi equivalent: `nvidia-smi -q` showing "Unknown Error" or "infoROM is corrupted".
    """
    failed = dict(gpu.query_errors)
    for query, error in gpu.query_errors:
        if error == CORRUPTED_INFOROM:
            yield _f("nvml.query", Severity.FAIL, gpu,
                     f"{label(gpu)}: NVML {query} answers CORRUPTED_INFOROM: the InfoROM is "
                     f"corrupted; reflash it or RMA the GPU", value=f"{query}: {error}",
                     action=Action.DRAIN)
            return
    for query, error in failed.items():
        yield _f("nvml.query", Severity.UNKNOWN, gpu,
                 f"{label(gpu)}: NVML {query} failed ({error}); what it reads is not checked",
                 value=f"{query}: {error}")

