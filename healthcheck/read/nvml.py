"""The one door to NVML: one pass over every GPU, into GpuSnapshot records.

    read = read_nvml(timeout_s=10.0)
    read.error            # None, or "DRIVER_NOT_LOADED", "LIBRARY_NOT_FOUND", ...
    read.gpus[3].ecc_volatile_uncorrected

Errors are kept apart, never swallowed as "N/A" (a health checker that turns a lost GPU into
"healthy" is worse than none):
- NOT_SUPPORTED / FUNCTION_NOT_FOUND: the field is None ("not available");
- GPU_IS_LOST / RESET_REQUIRED / UNKNOWN: GpuSnapshot.lost names the error, the record is kept;
- any other error on one query: GpuSnapshot.query_errors, which checks/node.py's `nvml.query`
  reports (unknown; CORRUPTED_INFOROM fails);
- a string that is not UTF-8 (a name or serial): decoded leniently, never an error;
- NVML that cannot initialise: NvmlRead.error (a node fault).

Each GPU is read in its own thread so that one GPU whose driver calls hang costs that GPU
(lost="TIMEOUT") and not the run: a blocked C call cannot be interrupted, only abandoned.  The
threads start one after another, each once the one before has answered or has had STAGGER_S
to: healthy GPUs are read as fast as by one thread, slow or hung ones in parallel.
"""

from __future__ import annotations

import threading
import time
from ctypes import byref
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Tuple

from ..model import GpuProcess, GpuSnapshot, MigDevice
from ..nvmlcodes import NVML_ERROR_NAMES as ERROR_NAMES
from ..records import NamedTuple
from ..text import printable

NOT_AVAILABLE = {3, 13}  # NOT_SUPPORTED, FUNCTION_NOT_FOUND
GPU_FATAL = {15, 16, 999}  # GPU_IS_LOST, RESET_REQUIRED, UNKNOWN

# nvml.h constants, spelled here so that this module's callers need not import pynvml
_UNCORRECTED, _CORRECTED = 1, 0  # nvmlMemoryErrorType_t
_VOLATILE, _AGGREGATE = 0, 1  # nvmlEccCounterType_t
_RETIRE_SBE, _RETIRE_DBE = 0, 1  # nvmlPageRetirementCause_t
_TEMP_GPU = 0  # NVML_TEMPERATURE_GPU
_TEMP_SLOWDOWN = 1  # NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
_TEMP_MEM_MAX = 2  # NVML_TEMPERATURE_THRESHOLD_MEM_MAX: HBM slowdown ("Memory Max Operating Temp")
_FI_RECOVERY_ACTION = 230  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
_FI_MEMORY_TEMP = 82  # NVML_FI_DEV_MEMORY_TEMP (HBM, degrees C)
_FI_PCIE_REPLAY = 94  # NVML_FI_DEV_PCIE_REPLAY_COUNTER
_FI_NVLINK_COUNT = 91  # NVML_FI_DEV_NVLINK_LINK_COUNT
# per link (scopeId = link): NVML_FI_DEV_NVLINK_GET_STATE, _ERROR_DL_CRC, _ERROR_DL_REPLAY,
# _ERROR_DL_RECOVERY.  The three counters are Hopper's; Blackwell reports them unsupported.
_FI_LINK_STATE, _FI_LINK_CRC, _FI_LINK_REPLAY, _FI_LINK_RECOVERY = 165, 163, 161, 162
_NVLINK_STATE_INACTIVE = 0  # NVML_NVLINK_STATE_*: ACTIVE 1, SLEEP 2, ACTIVE_TRAFFIC_DISABLED 3 are up
# NVLink4 (H100/H200) and NVLink5 (B200/GB200) GPUs have 18 links: query that many in the one
# batch, and a second batch only for a GPU that reports more.
_NVLINK_BATCH_LINKS = 18
_LINK_FIELDS = (_FI_LINK_STATE, _FI_LINK_CRC, _FI_LINK_REPLAY, _FI_LINK_RECOVERY)
_SCALAR_FIELDS = (_FI_RECOVERY_ACTION, _FI_MEMORY_TEMP, _FI_PCIE_REPLAY, _FI_NVLINK_COUNT)
_FIELD_BATCH = list(_SCALAR_FIELDS) + [(f, link) for link in range(_NVLINK_BATCH_LINKS)
                                       for f in _LINK_FIELDS]
_MEMORY_V2 = 0x02000028  # nvmlMemory_v2
_PSTATE_UNKNOWN = 32  # NVML_PSTATE_UNKNOWN
_NOT_FOUND = 6
_NO_PERMISSION = frozenset({4})


def error_name(exc: BaseException) -> str:
    code = getattr(exc, "value", None)
    if isinstance(code, int):
        return ERROR_NAMES.get(code, f"NVML_ERROR_{code}")
    return type(exc).__name__


class NvmlRead(NamedTuple):
    error: Optional[str] = None  # NVML could not initialise
    error_detail: str = ""
    driver_version: Optional[str] = None
    gpus: Tuple[GpuSnapshot, ...] = ()
    calls: Tuple[Tuple[str, str], ...] = ()  # (call, outcome) when traced, for tests/gpu


class _GpuLost(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _GpuReader:
    """Reads one GPU.  Runs in its own thread; only touches its own fields."""

    def __init__(self, nvml: Any, index: int, trace: Optional[List[Tuple[str, str]]]) -> None:
        self.nvml = nvml
        self.index = index
        self.fields: Dict[str, Any] = {"index": index}
        self.errors: List[Tuple[str, str]] = []
        self.trace = trace
        self.done = threading.Event()

    def query(self, name: str, fn: Callable[..., Any], *args: Any,
              absent: FrozenSet[int] = frozenset()) -> Any:
        """Call one NVML function; None when the GPU cannot answer it.  `absent`: error codes
        that mean "not available" for this query alone, besides NOT_AVAILABLE's."""
        try:
            value = fn(*args)
        except UnicodeDecodeError as exc:  # a string query's bytes were not UTF-8 (pynvml decodes)
            if self.trace is not None:
                self.trace.append((self._call(name, args), "UnicodeDecodeError"))
            self.errors.append((name, f"not UTF-8: {exc.reason} at byte {exc.start}"))
            return None
        except self.nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            outcome = error_name(exc)
            if self.trace is not None:
                self.trace.append((self._call(name, args), outcome))
            if code in GPU_FATAL:
                raise _GpuLost(outcome) from None
            if code not in NOT_AVAILABLE and code not in absent:
                self.errors.append((name, outcome))
            return None
        if self.trace is not None:
            self.trace.append((self._call(name, args), _show(value)[:160]))
        return value

    def _call(self, name: str, args: Tuple[Any, ...]) -> str:
        extra = ", ".join(repr(a) for a in args[1:]) if name != "HandleByIndex" else ""
        return f"gpu{self.index} {name}({extra})"

    def run(self) -> None:
        try:
            self._read()
        except _GpuLost as lost:
            self.fields["lost"] = lost.name
        except Exception as exc:  # noqa: BLE001 - one GPU's reader bug must not lose the run
            self.errors.append(("reader", f"{type(exc).__name__}: {exc}"))
        finally:
            self.done.set()

    def _read(self) -> None:
        n, f, q = self.nvml, self.fields, self.query
        handle = q("HandleByIndex", n.nvmlDeviceGetHandleByIndex, self.index)
        if handle is None:
            raise _GpuLost("NOT_FOUND")
        # the undecorated calls: pynvml decodes strings as strict UTF-8 and raises on a name or
        # serial that is not (555.x drivers: pynvml#53, nvitop#127, gpustat#170); _text is lenient
        f["uuid"] = _text(q("UUID", _raw(n.nvmlDeviceGetUUID), handle))
        f["serial"] = _text(q("Serial", _raw(n.nvmlDeviceGetSerial), handle))
        f["name"] = _text(q("Name", _raw(n.nvmlDeviceGetName), handle))
        pci = q("PciInfo", n.nvmlDeviceGetPciInfo, handle)
        if pci is not None:
            f["pci_bus_id"] = _text(pci.busId)
        f["minor_number"] = q("MinorNumber", n.nvmlDeviceGetMinorNumber, handle)

        mode = q("EccMode", n.nvmlDeviceGetEccMode, handle)
        if mode is not None:
            f["ecc_mode_current"], f["ecc_mode_pending"] = bool(mode[0]), bool(mode[1])
            if mode[0]:
                total = n.nvmlDeviceGetTotalEccErrors
                f["ecc_volatile_uncorrected"] = q("TotalEccErrors", total, handle, _UNCORRECTED, _VOLATILE)
                f["ecc_volatile_corrected"] = q("TotalEccErrors", total, handle, _CORRECTED, _VOLATILE)
                f["ecc_aggregate_uncorrected"] = q("TotalEccErrors", total, handle, _UNCORRECTED, _AGGREGATE)
                f["ecc_aggregate_corrected"] = q("TotalEccErrors", total, handle, _CORRECTED, _AGGREGATE)
                self._read_sram(handle)

        remap = q("RemappedRows", n.nvmlDeviceGetRemappedRows, handle)
        if remap is not None:
            f["remap_correctable"], f["remap_uncorrectable"] = int(remap[0]), int(remap[1])
            f["remap_pending"], f["remap_failure"] = bool(remap[2]), bool(remap[3])
        else:
            # Page retirement is the pre-Ampere mechanism; Ampere and later remap rows instead.
            sbe = q("RetiredPages", n.nvmlDeviceGetRetiredPages, handle, _RETIRE_SBE)
            dbe = q("RetiredPages", n.nvmlDeviceGetRetiredPages, handle, _RETIRE_DBE)
            f["retired_sbe"] = None if sbe is None else len(sbe)
            f["retired_dbe"] = None if dbe is None else len(dbe)
            pending = q("RetiredPagesPendingStatus", n.nvmlDeviceGetRetiredPagesPendingStatus, handle)
            f["retired_pending"] = None if pending is None else bool(pending)

        self._read_fields(handle)
        self._read_fabric(handle)
        if remap is not None:
            hist = q("RowRemapperHistogram", n.nvmlDeviceGetRowRemapperHistogram, handle)
            if hist is not None:
                f["remap_histogram"] = (int(hist.max), int(hist.high), int(hist.partial),
                                        int(hist.low), int(hist.none))

        memory = q("MemoryInfo", n.nvmlDeviceGetMemoryInfo, handle, _MEMORY_V2)
        if memory is None:  # drivers before r510 have no _v2
            memory = q("MemoryInfo", n.nvmlDeviceGetMemoryInfo, handle)
            if memory is not None:  # the v1 answer stands: v2's refusal was no fault
                self.errors = [e for e in self.errors if e[0] != "MemoryInfo"]
        if memory is not None:
            f["memory_total_mib"] = int(memory.total) >> 20
            f["memory_used_mib"] = int(memory.used) >> 20
        procs = q("ComputeRunningProcesses", n.nvmlDeviceGetComputeRunningProcesses, handle)
        if procs is not None:
            f["processes"] = _processes(procs)
        graphics = q("GraphicsRunningProcesses", n.nvmlDeviceGetGraphicsRunningProcesses, handle)
        if graphics is not None:
            f["graphics_processes"] = _processes(graphics)
        utilization = q("UtilizationRates", n.nvmlDeviceGetUtilizationRates, handle)
        if utilization is not None:
            f["utilization_gpu_pct"] = int(utilization.gpu)
            f["utilization_memory_pct"] = int(utilization.memory)
        pstate = q("PerformanceState", n.nvmlDeviceGetPerformanceState, handle)
        f["pstate"] = None if pstate is None or int(pstate) == _PSTATE_UNKNOWN else int(pstate)

        f["temperature_c"] = q("Temperature", n.nvmlDeviceGetTemperature, handle, _TEMP_GPU)
        f["temperature_slowdown_c"] = q(
            "TemperatureThreshold", n.nvmlDeviceGetTemperatureThreshold, handle, _TEMP_SLOWDOWN)
        reasons_fn = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            n, "nvmlDeviceGetCurrentClocksThrottleReasons")
        f["clocks_event_reasons"] = q("CurrentClocksEventReasons", reasons_fn, handle)
        f["pcie_gen_current"] = q("CurrPcieLinkGeneration", n.nvmlDeviceGetCurrPcieLinkGeneration, handle)
        f["pcie_gen_max"] = q("MaxPcieLinkGeneration", n.nvmlDeviceGetMaxPcieLinkGeneration, handle)
        f["pcie_width_current"] = q("CurrPcieLinkWidth", n.nvmlDeviceGetCurrPcieLinkWidth, handle)
        f["pcie_width_max"] = q("MaxPcieLinkWidth", n.nvmlDeviceGetMaxPcieLinkWidth, handle)
        persistence = q("PersistenceMode", n.nvmlDeviceGetPersistenceMode, handle)
        f["persistence_mode"] = None if persistence is None else bool(persistence)
        mig = q("MigMode", n.nvmlDeviceGetMigMode, handle)
        f["mig_mode"] = None if mig is None else bool(mig[0])
        if f["mig_mode"]:
            f["mig_devices"] = self._mig_devices(handle)
        # who may open a context here (nvidia-smi -c): a probe refused under EXCLUSIVE_PROCESS or
        # PROHIBITED is the GPU's configuration, not its fault (checks/probe.py)
        f["compute_mode"] = q("ComputeMode", n.nvmlDeviceGetComputeMode, handle)
        f["power_mw"] = q("PowerUsage", n.nvmlDeviceGetPowerUsage, handle)
        if f.get("memory_temperature_c") is not None:
            f["memory_temperature_max_c"] = q(
                "TemperatureThreshold", n.nvmlDeviceGetTemperatureThreshold, handle, _TEMP_MEM_MAX)

    def _read_sram(self, handle: Any) -> None:
        """The SRAM ECC error status (Ampere and later).  NVIDIA's Xid catalogue sends an Xid 48
        to field diagnostics when its threshold flag (`bThresholdExceeded`: "the error threshold
        of field diag is exceeded", nvml.h) is set, and to a reset otherwise."""
        make = getattr(self.nvml, "c_nvmlEccSramErrorStatus_v1_t", None)
        call = getattr(self.nvml, "nvmlDeviceGetSramEccErrorStatus", None)
        if make is None or call is None:
            return  # a pynvml older than the call (nvidia-ml-py 12.550): not available
        status = make()
        # NVML requires root for it: a user's `--node` has no flag to read, and that is no fault
        # of the GPU (a root prolog reads it)
        if self.query("SramEccErrorStatus", call, handle, byref(status), absent=_NO_PERMISSION) is None:
            return
        f = self.fields
        f["sram_threshold_exceeded"] = bool(status.bThresholdExceeded)
        f["sram_aggregate_uncorrected"] = int(status.aggregateUncParity) + int(status.aggregateUncSecDed)

    def _read_fields(self, handle: Any) -> None:
        """Recovery action, HBM temperature, PCIe replays and every NVLink's state and error
        counters in one nvmlDeviceGetFieldValues call: one driver round trip instead of ~75."""
        values = self.query("FieldValues", self.nvml.nvmlDeviceGetFieldValues, handle, _FIELD_BATCH)
        if values is None:
            return
        got = {(int(v.fieldId), int(v.scopeId)): _field_value(v) for v in values
               if v.nvmlReturn == 0}
        f = self.fields
        f["recovery_action"] = got.get((_FI_RECOVERY_ACTION, 0))
        f["memory_temperature_c"] = got.get((_FI_MEMORY_TEMP, 0))
        f["pcie_replay"] = got.get((_FI_PCIE_REPLAY, 0))
        count = got.get((_FI_NVLINK_COUNT, 0))
        if not count:
            return  # a PCIe board, or a driver without NVLink fields: nothing to judge
        f["nvlink_links"] = count
        if count > _NVLINK_BATCH_LINKS:
            extra = [(fid, link) for link in range(_NVLINK_BATCH_LINKS, count) for fid in _LINK_FIELDS]
            more = self.query("FieldValues", self.nvml.nvmlDeviceGetFieldValues, handle, extra)
            for v in more or ():
                if v.nvmlReturn == 0:
                    got[(int(v.fieldId), int(v.scopeId))] = _field_value(v)
        down, counters = [], []
        for link in range(count):
            state = got.get((_FI_LINK_STATE, link))
            if state == _NVLINK_STATE_INACTIVE:
                down.append(link)
            crc, replay, recovery = (got.get((fid, link)) for fid in _LINK_FIELDS[1:])
            if crc is not None or replay is not None or recovery is not None:
                counters.append((link, crc or 0, replay or 0, recovery or 0))
        if any((_FI_LINK_STATE, link) in got for link in range(count)):
            f["nvlink_down"] = tuple(down)
        if counters:
            f["nvlink_counters"] = tuple(counters)
            f["nvlink_crc_errors"] = sum(c[1] for c in counters)
            f["nvlink_replay_errors"] = sum(c[2] for c in counters)
            f["nvlink_recovery_errors"] = sum(c[3] for c in counters)

    def _read_fabric(self, handle: Any) -> None:
        """NVSwitch fabric registration (Hopper and later); NOT_SUPPORTED on other boards.

        The v3 structure adds the health summary; a driver that predates it answers
        ARGUMENT_VERSION_MISMATCH, and v2 is asked instead.
        """
        n = self.nvml
        info = None
        for type_name in ("c_nvmlGpuFabricInfo_v3_t", "c_nvmlGpuFabricInfoV_t"):
            info_type = getattr(n, type_name, None)
            if info_type is None:
                continue
            info = info_type()
            try:
                # pynvml hands the argument to C as given: the structure must go by reference
                n.nvmlDeviceGetGpuFabricInfoV(handle, byref(info))
            except n.NVMLError as exc:
                if getattr(exc, "value", None) == 25 and type_name.endswith("v3_t"):
                    continue  # ARGUMENT_VERSION_MISMATCH: a driver before v3
                self.query("GpuFabricInfoV", _raise, exc)
                return
            if self.trace is not None:
                self.trace.append((self._call("GpuFabricInfoV", ()), _show(info)[:160]))
            break
        else:
            return
        f = self.fields
        f["fabric_state"] = int(info.state)
        f["fabric_status"] = int(info.status)
        f["fabric_clique_id"] = int(info.cliqueId)
        f["fabric_health_mask"] = int(info.healthMask)
        summary = getattr(info, "healthSummary", None)
        f["fabric_health_summary"] = None if summary is None else int(summary)
        raw = bytes(info.clusterUuid)
        if any(raw):
            h = raw.hex()
            f["fabric_cluster_uuid"] = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def _mig_devices(self, handle: Any) -> Optional[Tuple[MigDevice, ...]]:
        """The MIG devices of a MIG-enabled GPU: the devices CUDA can use on it."""
        n, q = self.nvml, self.query
        count = q("MaxMigDeviceCount", n.nvmlDeviceGetMaxMigDeviceCount, handle)
        if count is None:
            return None
        found = []
        for i in range(int(count)):
            try:  # NOT_FOUND: no MIG device at this index, which is normal, not an error
                mig = n.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
            except n.NVMLError as exc:
                if getattr(exc, "value", None) == _NOT_FOUND:
                    continue
                q("MigDeviceHandleByIndex", _raise, exc)
                continue
            memory = q("MigMemoryInfo", n.nvmlDeviceGetMemoryInfo, mig)
            found.append(MigDevice(index=i, uuid=_text(q("MigUUID", n.nvmlDeviceGetUUID, mig)),
                                   memory_total_mib=None if memory is None else int(memory.total) >> 20))
        return tuple(found)

    def snapshot(self) -> GpuSnapshot:
        return GpuSnapshot(**self.fields, query_errors=tuple(self.errors))


def _raw(fn: Callable[..., Any]) -> Callable[..., Any]:
    """pynvml's function without its convertStrBytes decorator (functools.wraps keeps it as
    __wrapped__): the driver's bytes, for _text to decode leniently."""
    return getattr(fn, "__wrapped__", fn)


def _raise(exc: BaseException) -> None:
    """Re-raise an NVML error inside query(), so that it is sorted like any other."""
    raise exc


def _processes(procs: Any) -> Tuple[GpuProcess, ...]:
    return tuple(GpuProcess(pid=int(p.pid), used_mib=_mib(p.usedGpuMemory)) for p in procs)


def _field_value(v: Any) -> Optional[int]:
    """An nvmlFieldValue_t's value as an int, by its valueType (NVML_VALUE_TYPE_*)."""
    kind = v.valueType
    if kind == 1:
        return int(v.value.uiVal)
    if kind == 3 or kind == 2:
        return int(v.value.ullVal)
    if kind == 0:
        return int(v.value.dVal)
    if kind == 4:
        return int(v.value.sllVal)
    if kind == 5:
        return int(v.value.siVal)
    if kind == 6:
        return int(v.value.usVal)
    return None


def _show(value: Any) -> str:
    """A traced NVML result as a person reads it: ctypes structures by field (tests/gpu/validate)."""
    fields = getattr(value, "_fields_", None)
    if fields:
        return "{" + ", ".join(f"{f[0]}={_show(getattr(value, f[0]))}" for f in fields
                               if not f[0].startswith("reserved")) + "}"
    if hasattr(value, "_length_") and hasattr(value, "__len__"):  # a ctypes array
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, bytes):
        return repr(value.decode("utf-8", "replace"))
    if type(value).__name__.startswith("LP_"):
        return "<handle>"
    return repr(value)


def _text(value: Any) -> Optional[str]:
    """An NVML string, as one printable line (text.printable): the driver is trusted to
    report, not to be well-formed."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return printable(str(value).strip(), 256) or None


def _mib(value: Any) -> Optional[int]:
    # pynvml reports None where the driver cannot attribute memory (NVML_VALUE_NOT_AVAILABLE)
    return None if value is None else int(value) >> 20


STAGGER_S = 0.05  # how long one GPU's reader runs alone before the next starts beside it


def read_nvml(timeout_s: float, trace: bool = False) -> NvmlRead:
    """Initialise NVML and read every GPU, each in its own thread, within timeout_s.

    nvmlInit itself runs in a thread too: a driver that never answers it would otherwise hold
    the run past every deadline (error "TIMEOUT", a node fault like any failed init).
    """
    # A missing or broken pynvml (nvidia-ml-py) is our install's fault, not the node's: the
    # ImportError goes up to the CLI's internal-error handler (no drain, exit 0 from a prolog).
    import pynvml

    deadline = time.monotonic() + timeout_s
    init: Dict[str, Any] = {}

    def initialise() -> None:
        try:
            pynvml.nvmlInit()
            init["initialised"] = True
            try:
                init["driver"] = _text(pynvml.nvmlSystemGetDriverVersion())
            except pynvml.NVMLError as exc:  # not available: a replayed dump without one
                if getattr(exc, "value", None) not in NOT_AVAILABLE:
                    raise
                init["driver"] = None
            init["count"] = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            init["error"] = exc
        except Exception as exc:  # noqa: BLE001 - re-raised in the caller's thread below
            init["bug"] = exc

    starter = threading.Thread(target=initialise, name="nvml-init", daemon=True)
    starter.start()
    starter.join(max(0.0, deadline - time.monotonic()))
    if starter.is_alive():
        return NvmlRead(error="TIMEOUT", error_detail=f"nvmlInit did not return within {timeout_s:g} s")
    if "bug" in init:
        raise init["bug"]
    if "error" in init:
        # nvmlInit may have succeeded before a later call failed: balance it
        if "initialised" in init:
            _shutdown(pynvml)
        return NvmlRead(error=error_name(init["error"]), error_detail=str(init["error"]))
    calls: List[Tuple[str, str]] = []
    hung = False
    try:
        readers = [_GpuReader(pynvml, i, calls if trace else None) for i in range(init["count"])]
        threads = [threading.Thread(target=r.run, name=f"nvml-gpu{r.index}", daemon=True)
                   for r in readers]
        # Started one after another: a thread that answers at once (as a healthy GPU does, in
        # well under a millisecond) is done before the next starts, so the threads never fight
        # over the GIL (every NVML call releases it: eight readers at once cost 1.5 ms more
        # than one at a time).  A GPU that has not answered within its stagger gets company:
        # every thread has started by a quarter of the deadline, however many GPUs hang.
        stagger = min(STAGGER_S, timeout_s / (4 * max(1, len(readers))))
        for reader, thread in zip(readers, threads):
            thread.start()
            reader.done.wait(max(0.0, min(stagger, deadline - time.monotonic())))
        gpus = []
        for reader in readers:
            if reader.done.wait(max(0.0, deadline - time.monotonic())):
                gpus.append(reader.snapshot())
            else:
                hung = True
                gpus.append(reader.snapshot()._replace(lost="TIMEOUT"))
        return NvmlRead(driver_version=init["driver"], gpus=tuple(gpus), calls=tuple(calls))
    finally:
        # nvmlShutdown while a thread is still inside NVML could crash the process
        if not hung:
            _shutdown(pynvml)


def _shutdown(pynvml: Any) -> None:
    try:
        pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        pass

