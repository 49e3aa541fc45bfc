#!/usr/bin/env python3
"""Turn a real ``nvidia-smi -q -x`` dump into a fakegpu scenario.

    python3 tests/fakegpu/from_nvidia_smi.py DUMP.xml > node.scenario
    python3 tests/fakegpu/from_nvidia_smi.py DUMP.txt > node.scenario   # `nvidia-smi -q` text
    python3 tests/fakegpu/from_nvidia_smi.py NVLINK.txt >> node.scenario # `nvidia-smi nvlink --status`

Text input goes through nvidia_smi_text.py, which builds the same tree as the XML (so both
give the same keys), or, for `nvidia-smi nvlink --status`, gives NVLink keys to append.

Every GPU of the dump becomes ``gpu.N.*`` lines, in dump order.  A field the
dump shows as ``N/A``, redacted or deprecated (or leaves out) becomes a
``gpu.N.unsupported`` entry naming the NVML query that would fail with
NOT_SUPPORTED on that board; no default of the fake (an H100) stands in for it.
Where NVML has no NOT_SUPPORTED for a value (the driver version, a PCI ID),
the scenario says "not known" explicitly (empty, 0).

Standard library only (Python >= 3.9).  The XML is parsed with
xml.etree.ElementTree after refusing any document that declares entities
(``<!ENTITY``): real dumps carry only ``<!DOCTYPE nvidia_smi_log SYSTEM
"nvsmi_device_vNN.dtd">``, which is accepted and never fetched.

Importable: ``convert(path_or_text) -> str`` and ``main(argv) -> int``.
"""
import math
import os
import re
import sys
import xml.etree.ElementTree as ET

__all__ = ["convert", "main", "UnsafeXMLError"]


class UnsafeXMLError(ValueError):
    """The document declares entities; it is refused, not parsed."""


def _parse(text):
    if re.search(r"<!ENTITY", text, re.IGNORECASE):
        raise UnsafeXMLError("refusing XML that declares entities (<!ENTITY)")
    return ET.fromstring(text)


def _txt(elem, path):
    """Stripped text at path, or None when missing, empty or N/A."""
    if elem is None:
        return None
    node = elem.find(path) if path else elem
    if node is None or node.text is None:
        return None
    value = node.text.strip()
    if not value or value.upper() in _ABSENT:
        return None
    return value


# What nvidia-smi prints where it has no value to give.
_ABSENT = {"N/A", "[N/A]", "NOT AVAILABLE", "UNKNOWN ERROR", "UNKNOWN", "REDACTED", "[REDACTED]",
           "<REDACTED>", "NOT SUPPORTED", "[NOT SUPPORTED]", "INSUFFICIENT PERMISSIONS",
           "[INSUFFICIENT PERMISSIONS]", "REQUESTED FUNCTIONALITY HAS BEEN DEPRECATED"}


def _signed(elem, path):
    """Leading signed integer ("-7 C"), else None: v13's relative thresholds."""
    value = _txt(elem, path)
    m = re.match(r"\s*([-+]?\d+)", value or "")
    return int(m.group(1)) if m else None


def _int(elem, path):
    """Leading integer of a field ("16x", "4096 MiB", "40 C"), else None."""
    value = _txt(elem, path)
    if value is None:
        return None
    m = re.match(r"\s*(\d+)", value)
    return int(m.group(1)) if m else None


def _float(elem, path):
    value = _txt(elem, path)
    if value is None:
        return None
    m = re.match(r"\s*(\d+(?:\.\d+)?)", value)
    return float(m.group(1)) if m else None


def _flag(elem, path):
    """Enabled/Yes/Active -> 1, Disabled/No/Not Active -> 0, else None."""
    value = _txt(elem, path)
    if value is None:
        return None
    v = value.strip().lower()
    if v in ("enabled", "yes", "active", "enable", "true"):
        return 1
    if v in ("disabled", "no", "not active", "disable", "false"):
        return 0
    return None


_UUID_RE = re.compile(r"^GPU-[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$")
_PCI_RE = re.compile(r"^([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.0$")

# Bits of nvmlClocksEventReasons, by the suffix nvidia-smi prints.
_CLOCK_REASONS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clocks_setting": 0x100,
}


_CORRECTABLE = re.compile(r"(^|_)correctable(_|$)")
_UNCORRECTABLE = re.compile(r"(^|_)uncorrectable(_|$)")


def _ecc_totals(gpu, kind):
    """(corrected, uncorrected) of ecc_errors/<kind>, each None if N/A.

    Driver >= 520 (dump v12) splits SRAM and DRAM (sram_correctable,
    sram_uncorrectable, dram_...); driver 570+ (v13) splits the SRAM
    uncorrectable count again into sram_uncorrectable_parity and
    sram_uncorrectable_secded.  NVML's total is the sum over every location,
    so every child named *correctable* / *uncorrectable* counts, whatever
    the layout adds next.  Older drivers give single_bit/total and
    double_bit/total.
    """
    base = gpu.find("ecc_errors/" + kind)
    if base is None:
        return None, None
    if base.find("single_bit") is not None or base.find("double_bit") is not None:
        return _int(base, "single_bit/total"), _int(base, "double_bit/total")

    def total(pattern):
        values = [_int(child, None) for child in base if pattern.search(child.tag)]
        values = [v for v in values if v is not None]
        return sum(values) if values else None

    return total(_CORRECTABLE), total(_UNCORRECTABLE)


def _pci_bus_id(gpu):
    for value in (_txt(gpu, "pci/pci_bus_id"), gpu.get("id")):
        if value:
            m = _PCI_RE.match(value.strip())
            if m:
                return "%08X:%s:%s.0" % (int(m.group(1), 16), m.group(2).upper(), m.group(3).upper())
    return None


# nvidia-smi's Fabric "Status" text -> the nvmlReturn_t the fake serves (0 = success).
FABRIC_STATUS = {"success": 0, "not supported": 3, "timeout": 10, "insufficient resources": 23,
                 "not ready": 27, "in progress": 0}
FABRIC_STATES = {"not supported": "not_supported", "not started": "not_started",
                 "in progress": "in_progress", "completed": "completed"}


def _fabric_lines(gpu, put, unsup):
    """NVLink fabric, PCIe replays, HBM temperature and the remapper
    histogram.  NVLink links are not in `nvidia-smi -q` (that is `nvidia-smi nvlink --status`,
    see nvidia_smi_text.py): a dump alone leaves them unsupported."""
    state = (_txt(gpu, "fabric/state") or "").lower()
    if state in FABRIC_STATES and state != "not supported":
        put("fabric.state", FABRIC_STATES[state])
        status = (_txt(gpu, "fabric/status") or "success").lower()
        if status not in FABRIC_STATUS:
            put("fabric.status", 999)  # NVML_ERROR_UNKNOWN: a status this script cannot name
        else:
            put("fabric.status", FABRIC_STATUS[status])
        clique = _int(gpu, "fabric/cliqueId")
        if clique is not None:
            put("fabric.clique_id", clique)
        cluster = _txt(gpu, "fabric/clusterUuid")
        if cluster and re.match(r"^[0-9A-Fa-f]{8}(-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}$", cluster):
            put("fabric.cluster_uuid", cluster)
        mask = 0
        for shift, path, bad in ((0, "fabric/health/bandwidth", "degraded"),
                                 (2, "fabric/health/route_recovery_in_progress", "true"),
                                 (4, "fabric/health/route_unhealthy", "true")):
            value = (_txt(gpu, path) or "").lower()
            if value:  # nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*: 1 = the condition holds, 2 = not
                mask |= (1 if value.startswith(bad) else 2) << shift
        put("fabric.health_mask", mask)
        summary = (_txt(gpu, "fabric/health/summary") or "").lower()
        summaries = {"healthy": 1, "unhealthy": 2, "limited capacity": 3}
        if summary in summaries:
            put("fabric.health_summary", summaries[summary])
    else:
        put("fabric.state", "not_supported")
        unsup("GpuFabricInfo")
    # `nvidia-smi -q` does not list NVLink links: none here; append the lines that
    # nvidia_smi_text.py makes of `nvidia-smi nvlink --status` to give them
    put("nvlink.links", 0)

    replay = _int(gpu, "pci/replay_counter")
    if replay is None:
        unsup("PcieReplayCounter")
    else:
        put("pcie.replay", replay)
    mem_temp = _int(gpu, "temperature/memory_temp")
    put("memory_temperature_c", mem_temp if mem_temp is not None else 0)  # 0: not reported
    mem_max = _int(gpu, "temperature/gpu_temp_max_mem_threshold")
    put("memory_temperature.max_c", mem_max if mem_max is not None else 0)
    hist = [_int(gpu, "remapped_rows/remapped_row_histogram/row_remap_histogram_" + b)
            for b in ("max", "high", "partial", "low", "none")]
    if None in hist:
        unsup("RowRemapperHistogram")
    else:
        put("remap.histogram", ",".join(str(h) for h in hist))


def _ecc_lines(gpu, put, unsup, excerpt=False):
    """ECC mode, then counters (the fake serves counters only with ECC enabled).

    A full dump without a mode and without counts says ECC is unsupported; with counts, ECC is
    on (nvidia-smi prints N/A counts with ECC off); an excerpt (excerpt=True) that shows
    the ECC Errors block without the ECC Mode block leaves the mode as it is and applies the
    counters it shows."""
    ecc = _flag(gpu, "ecc_mode/current_ecc")
    if ecc is None and not excerpt and any(v is not None for kind in ("volatile", "aggregate")
                                           for v in _ecc_totals(gpu, kind)):
        # no ECC Mode block (cut from the dump), but counts: nvidia-smi shows ECC counts only
        # with ECC on (N/A when off), so the mode is known, not made up
        ecc = 1
    if ecc is None and not excerpt:
        put("ecc_mode", "unsupported")
        unsup("EccMode", "TotalEccErrors", "MemoryErrorCounter")
        return
    if ecc is not None:
        put("ecc_mode", "enabled" if ecc else "disabled")
        pending = _flag(gpu, "ecc_mode/pending_ecc")
        if pending is not None:
            put("ecc_mode_pending", "enabled" if pending else "disabled")
    any_counter = False
    for kind in ("volatile", "aggregate"):
        corr, unc = _ecc_totals(gpu, kind)
        if corr is not None:
            put("ecc.%s.corrected" % kind, corr)
            any_counter = True
        if unc is not None:
            put("ecc.%s.uncorrected" % kind, unc)
            any_counter = True
    if ecc and not any_counter:
        unsup("TotalEccErrors", "MemoryErrorCounter")
    # driver 535+: the SRAM field-diagnostics flag (nvmlDeviceGetSramEccErrorStatus)
    threshold = _flag(gpu, "ecc_errors/aggregate/sram_threshold_exceeded")
    if threshold is not None:
        put("sram.threshold_exceeded", threshold)


def _retired_lines(gpu, put, unsup):
    """Page retirement (pre-Ampere boards): counts, and a retirement pending the next reset."""
    sbe = _int(gpu, "retired_pages/multiple_single_bit_retirement/retired_count")
    dbe = _int(gpu, "retired_pages/double_bit_retirement/retired_count")
    if sbe is None and dbe is None:
        unsup("RetiredPages")
    else:
        put("retired.sbe", sbe or 0)
        put("retired.dbe", dbe or 0)
    pending = _flag(gpu, "retired_pages/pending_retirement")
    if pending is None:
        pending = _flag(gpu, "retired_pages/pending_blacklist")
    if pending is None:
        unsup("RetiredPagesPendingStatus")
    else:
        put("retired.pending", pending)


def _remap_lines(gpu, put, unsup):
    """Row remapping (Ampere and later): counts, pending and failure."""
    remap = gpu.find("remapped_rows")
    if remap is None or _txt(remap, "remapped_row_corr") is None:
        unsup("RemappedRows")
    else:
        put("remap.correctable", _int(remap, "remapped_row_corr") or 0)
        put("remap.uncorrectable", _int(remap, "remapped_row_unc") or 0)
        put("remap.pending", _flag(remap, "remapped_row_pending") or 0)
        put("remap.failure", _flag(remap, "remapped_row_failure") or 0)


def _gpu_lines(n, gpu):
    out = []
    unsupported = []

    def put(key, value):
        out.append("gpu.%d.%s = %s" % (n, key, value))

    def unsup(*names):
        for name in names:
            if name not in unsupported:
                unsupported.append(name)

    name = _txt(gpu, "product_name")
    if name:
        put("name", name.replace("#", " ")[:95])
    else:
        unsup("Name")
    uuid = _txt(gpu, "uuid")
    if uuid and _UUID_RE.match(uuid):
        put("uuid", uuid)
    else:
        # NVML gives no GPU without a UUID; the fake's stays for CUDA, NVML says NOT_SUPPORTED.
        unsup("UUID")
    serial = _txt(gpu, "serial")
    if serial and "#" not in serial and len(serial) < 30:
        put("serial", serial)
    else:
        unsup("Serial")
    pci = _pci_bus_id(gpu)
    if pci:
        put("pci_bus_id", pci)
    for key, path in (("pci_device_id", "pci/pci_device_id"), ("pci_subsystem_id", "pci/pci_sub_system_id")):
        value = _txt(gpu, path)
        if value and re.match(r"^(0x)?[0-9A-Fa-f]{1,8}$", value):
            put(key, "0x%08X" % int(value, 16))
        else:
            put(key, "0x00000000  # not in the dump")
    minor = _int(gpu, "minor_number")
    if minor is not None:
        put("minor_number", minor)
    else:
        unsup("MinorNumber")

    _ecc_lines(gpu, put, unsup)
    _retired_lines(gpu, put, unsup)
    _remap_lines(gpu, put, unsup)

    # Memory (MiB).
    total = _int(gpu, "fb_memory_usage/total")
    if total is None:
        unsup("MemoryInfo")
    else:
        put("memory.total_mib", total)
        put("memory.used_mib", _int(gpu, "fb_memory_usage/used") or 0)
        put("memory.reserved_mib", _int(gpu, "fb_memory_usage/reserved") or 0)

    # Type C is a compute process, G a graphics one (Xorg), C+G both: NVML
    # lists it in both nvmlDeviceGetComputeRunningProcesses and
    # nvmlDeviceGetGraphicsRunningProcesses.
    procs, gprocs = [], []
    for p in gpu.findall("processes/process_info"):
        ptype = (_txt(p, "type") or "").upper()
        pid = _int(p, "pid")
        if pid is None:
            continue
        entry = "%d:%d" % (pid, _int(p, "used_memory") or 0)
        if "C" in ptype:
            procs.append(entry)
        if "G" in ptype:
            gprocs.append(entry)
    if gpu.find("processes") is None:
        unsup("ComputeRunningProcesses", "GraphicsRunningProcesses")  # the dump does not say
    if procs:
        put("processes", ",".join(procs[:64]))
    if gprocs:
        put("graphics_processes", ",".join(gprocs[:64]))

    temp = _int(gpu, "temperature/gpu_temp")
    if temp is None:
        unsup("Temperature")
    else:
        put("temperature_c", temp)
    slow, shut, gpu_max = _thresholds(gpu, temp)
    if slow is None or shut is None:
        unsup("TemperatureThreshold")
    if slow is not None:
        put("temperature.slowdown_c", slow)
    if shut is not None:
        put("temperature.shutdown_c", shut)
    put("temperature.gpu_max_c", -1 if gpu_max is None else gpu_max)

    _power_lines(gpu, put, unsup)

    reasons = gpu.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if reasons is None:
        reasons = gpu.find("clocks_throttle_reasons")
        prefix = "clocks_throttle_reason_"
    if reasons is None:
        unsup("CurrentClocksEventReasons")
    else:
        mask = 0
        for suffix, bit in _CLOCK_REASONS.items():
            if _flag(reasons, prefix + suffix) == 1:
                mask |= bit
        put("clocks_event_reasons", "0x%X" % mask)

    link = "pci/pci_gpu_link_info/"
    for key, path, func in (
        ("pcie.gen_current", "pcie_gen/current_link_gen", "CurrPcieLinkGeneration"),
        ("pcie.gen_max", "pcie_gen/max_link_gen", "MaxPcieLinkGeneration"),
        ("pcie.width_current", "link_widths/current_link_width", "CurrPcieLinkWidth"),
        ("pcie.width_max", "link_widths/max_link_width", "MaxPcieLinkWidth"),
    ):
        value = _int(gpu, link + path)
        if value is None or value > 64:
            unsup(func)
        else:
            put(key, value)

    persistence = _flag(gpu, "persistence_mode")
    if persistence is None:
        unsup("PersistenceMode")
    else:
        put("persistence_mode", persistence)
    mig = _flag(gpu, "mig_mode/current_mig")
    if mig is None:
        unsup("MigMode")
    else:
        put("mig_mode", mig)

    _monitoring_lines(gpu, put, unsup)
    action = (_txt(gpu, "gpu_recovery_action") or "").lower()
    if action in _RECOVERY_ACTIONS:
        put("recovery_action", _RECOVERY_ACTIONS[action])
    else:
        unsup("GpuRecoveryAction")  # drivers before 570 do not know the field
    _fabric_lines(gpu, put, unsup)
    put("unsupported", ",".join(unsupported))
    return out


# nvidia-smi's words for nvmlDeviceGpuRecoveryAction_t
_RECOVERY_ACTIONS = {"none": 0, "reset": 1, "gpu reset": 1, "reboot": 2, "node reboot": 2,
                     "drain p2p": 3, "drain and reset": 4}


def _thresholds(gpu, temp):
    """Absolute (slowdown, shutdown, GPU max operating) temperatures, each None if unknown.

    Up to v12 the dump gives them in degrees C.  v13 boards that report a T.Limit give
    instead the current margin below T.Limit (gpu_temp_tlimit) and each threshold relative
    to T.Limit (gpu_temp_slow_tlimit_threshold = -2 means 2 C past it).  With the current
    temperature beside the margin, T.Limit and so every threshold is absolute again:
    threshold = gpu_temp + gpu_temp_tlimit - relative.
    """
    t = "temperature/"
    absolute = [_int(gpu, t + name) for name in (
        "gpu_temp_slow_threshold", "gpu_temp_max_threshold", "gpu_temp_max_gpu_threshold")]
    margin = _signed(gpu, t + "gpu_temp_tlimit")
    if temp is None or margin is None:
        return tuple(absolute)
    tlimit = temp + margin
    relative = [_signed(gpu, t + name) for name in (
        "gpu_temp_slow_tlimit_threshold", "gpu_temp_max_tlimit_threshold",
        "gpu_temp_max_gpu_tlimit_threshold")]
    return tuple(a if a is not None else (None if r is None or not 0 <= tlimit - r <= 1000
                                         else tlimit - r)
                 for a, r in zip(absolute, relative))


def _milliwatts(gpu, *paths):
    """The first of these power fields the dump has ("67.03 W"), in mW, else None."""
    for path in paths:
        watts = _float(gpu, path)
        # A draw of 306+ digits makes watts * 1000 inf, and int(round(inf)) raised
        # OverflowError past main()'s handler (found by tests/fuzz/fuzz_xml_replay.py).
        if watts is not None and math.isfinite(watts * 1000) and watts * 1000 < 2 ** 32:
            return int(round(watts * 1000))
    return None


def _power_lines(gpu, put, unsup):
    # nvmlDeviceGetPowerUsage is what nvidia-smi showed as power_draw; driver 570+ (v13)
    # shows it as average_power_draw (a 1 s average on Ampere and later) beside the
    # instantaneous reading.
    v12, old = "gpu_power_readings/", "power_readings/"
    draw = _milliwatts(gpu, v12 + "power_draw", old + "power_draw", v12 + "average_power_draw",
                       v12 + "instant_power_draw")
    if draw is None:
        unsup("PowerUsage")
    else:
        put("power_mw", draw)
    for key, names, func in (
        ("power_limit_mw", ("current_power_limit", "power_limit"), "PowerManagementLimit"),
        ("power.enforced_limit_mw", ("enforced_power_limit", "current_power_limit"), "EnforcedPowerLimit"),
        ("power.default_limit_mw", ("default_power_limit",), "PowerManagementDefaultLimit"),
        ("power.min_limit_mw", ("min_power_limit",), "PowerManagementLimitConstraints"),
        ("power.max_limit_mw", ("max_power_limit",), "PowerManagementLimitConstraints"),
    ):
        value = _milliwatts(gpu, *[base + name for name in names for base in (v12, old)])
        if value is None:
            unsup(func)
        else:
            put(key, value)
    # The dump has no energy counter and no per-process utilization.
    unsup("TotalEnergyConsumption", "ProcessUtilization")


_ARCHITECTURES = {"kepler": "kepler", "maxwell": "maxwell", "pascal": "pascal", "volta": "volta",
                  "turing": "turing", "ampere": "ampere", "ada lovelace": "ada", "ada": "ada",
                  "hopper": "hopper", "blackwell": "blackwell", "rubin": "rubin"}
_BRANDS = {"quadro": "quadro", "tesla": "tesla", "nvs": "nvs", "grid": "grid", "geforce": "geforce",
           "titan": "titan", "nvidia vapps": "nvidia_vapps", "nvidia vpc": "nvidia_vpc",
           "nvidia vcs": "nvidia_vcs", "nvidia vws": "nvidia_vws",
           "nvidia cloud gaming": "nvidia_cloud_gaming", "quadro rtx": "quadro_rtx",
           "nvidia rtx": "nvidia_rtx", "nvidia": "nvidia", "geforce rtx": "geforce_rtx",
           "titan rtx": "titan_rtx"}
_COMPUTE_MODES = {"default": "default", "exclusive_thread": "exclusive_thread",
                  "prohibited": "prohibited", "exclusive_process": "exclusive_process"}
_DRIVER_MODELS = {"wddm": "wddm", "tcc": "tcc", "wdm": "wdm", "mcdm": "mcdm"}
# nvmlClockType_t order, as the scenario's clocks.* keys name them
_CLOCKS = (("graphics", "graphics_clock"), ("sm", "sm_clock"), ("mem", "mem_clock"),
           ("video", "video_clock"))


def _monitoring_lines(gpu, put, unsup):
    """What monitoring tools read: identity details, utilization, clocks, fans, BAR1, MIG."""

    def named(path, table, key, func):
        value = (_txt(gpu, path) or "").lower().replace("-", "_")
        if value.replace("_", " ") in table:
            put(key, table[value.replace("_", " ")])
        elif value in table:
            put(key, table[value])
        else:
            unsup(func)

    named("product_architecture", _ARCHITECTURES, "architecture", "Architecture")
    named("product_brand", _BRANDS, "brand", "Brand")
    named("compute_mode", _COMPUTE_MODES, "compute_mode", "ComputeMode")
    model = (_txt(gpu, "driver_model/current_dm") or "").lower()
    put("driver_model", _DRIVER_MODELS.get(model, "unsupported"))
    unsup("CudaComputeCapability")  # not in nvidia-smi -q -x
    for key, path, func in (("display_mode", "display_mode", "DisplayMode"),
                            ("display_active", "display_active", "DisplayActive")):
        flag = _flag(gpu, path)
        if flag is None:
            unsup(func)
        else:
            put(key, flag)

    util = [_int(gpu, "utilization/" + name) for name in ("gpu_util", "memory_util")]
    if None in util:
        unsup("UtilizationRates")
    else:
        put("utilization.gpu", min(util[0], 100))
        put("utilization.memory", min(util[1], 100))
    for key, name, func in (("encoder", "encoder_util", "EncoderUtilization"),
                            ("decoder", "decoder_util", "DecoderUtilization")):
        value = _int(gpu, "utilization/" + name)
        if value is None:
            unsup(func)
        else:
            put("utilization." + key, min(value, 100))

    m = re.match(r"^P(\d+)$", _txt(gpu, "performance_state") or "")
    if m and int(m.group(1)) <= 15:
        put("pstate", int(m.group(1)))
    else:
        unsup("PerformanceState")
    fan = _int(gpu, "fan_speed")
    if fan is None or fan > 100:
        unsup("FanSpeed")
    else:
        put("fan_pct", fan)
    unsup("NumFans")  # the dump does not say how many fans there are

    any_clock = False
    for prefix, suffix in (("clocks/", "_mhz"), ("max_clocks/", "_max_mhz")):
        for key, name in _CLOCKS:
            value = _int(gpu, prefix + name)
            ok = value is not None and value <= 100000
            any_clock |= ok and prefix == "clocks/"
            put("clocks.%s%s" % (key, suffix), value if ok else -1)  # -1: NOT_SUPPORTED
    if not any_clock:
        unsup("ClockInfo")

    bar1 = [_int(gpu, "bar1_memory_usage/" + name) for name in ("total", "used")]
    if None in bar1 or bar1[0] > 1 << 24:
        unsup("BAR1MemoryInfo")
    else:
        put("bar1.total_mib", bar1[0])
        put("bar1.used_mib", min(bar1[1], bar1[0]))
    vbios = _txt(gpu, "vbios_version")
    if vbios and "#" not in vbios and len(vbios) < 32:
        put("vbios_version", vbios)
    else:
        unsup("VbiosVersion")
    pcie = [_int(gpu, "pci/" + name) for name in ("tx_util", "rx_util")]
    if None in pcie or max(pcie) >= 1 << 32:
        unsup("PcieThroughput")
    else:
        put("pcie.tx_kbps", pcie[0])
        put("pcie.rx_kbps", pcie[1])

    migs = gpu.findall("mig_devices/mig_device")
    if migs:
        put("mig.instances", min(len(migs), 7))
        memory = _int(migs[0], "fb_memory_usage/total")
        if memory is not None and memory <= 1 << 24:
            put("mig.memory_mib", memory)
        used = _int(migs[0], "fb_memory_usage/used")
        if used is not None and used <= 1 << 24:
            put("mig.memory_used_mib", used)
        ids = [_int(m, "gpu_instance_id") for m in migs[:7]]
        if all(i is not None and 1 <= i <= 64 for i in ids) and len(set(ids)) == len(ids):
            put("mig.gpu_instance_ids", ",".join(map(str, ids)))


# nvidia-smi's own line for a GPU whose device handle NVML cannot get, printed in place of that
# GPU (alone, or before the other GPUs' output): "GPU is lost. Reboot the system to recover this
# GPU" (NVML_ERROR_GPU_IS_LOST) or "Unknown Error" (NVML_ERROR_UNKNOWN).  Both GPUs are unusable;
# the fake's gpu.N.lost (every call on the GPU fails) is how such a GPU is replayed.
_NO_HANDLE = re.compile(r"^\s*Unable to determine the device handle for GPU ?"
                        r"([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.([0-7]))?:\s*(.*?)\s*$")


def _split_lost(text):
    """(the text without nvidia-smi's "Unable to determine the device handle" lines, the
    [(pci_bus_id, nvidia-smi's reason)] of those lines)."""
    kept, lost = [], []
    for line in text.splitlines():
        m = _NO_HANDLE.match(line)
        if m:
            domain, bus, dev, fn, why = m.groups()
            lost.append(("%s:%s:%s.%s" % (domain.zfill(8), bus, dev, fn or "0"), why.rstrip(".")))
        else:
            kept.append(line)
    return "\n".join(kept), [(pci.upper(), why) for pci, why in lost]


def _lost_lines(first, lost):
    """Scenario lines for the GPUs nvidia-smi could not open, numbered from `first`."""
    lines = []
    for n, (pci, why) in enumerate(lost, start=first):
        lines += ["", "# GPU %d: %s: nvidia-smi: %s" % (n, pci, why[:120]),
                  "gpu.%d.pci_bus_id = %s" % (n, pci), "gpu.%d.lost = 1" % n]
    return lines


def convert(path_or_text):
    """Scenario text for a dump given as a path, XML text or bytes; nvidia-smi's "Unable to
    determine the device handle for GPU ..." lines become lost GPUs after the dump's own."""
    if isinstance(path_or_text, bytes):
        text, source = path_or_text.decode("utf-8", "replace"), "<bytes>"
    elif isinstance(path_or_text, os.PathLike) or (
        isinstance(path_or_text, str) and "<" not in path_or_text and "\n" not in path_or_text
    ):
        source = os.fspath(path_or_text)
        with open(source, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    else:
        text, source = path_or_text, "<text>"
    text, lost = _split_lost(text)
    if lost and not text.strip():  # all nvidia-smi printed: every GPU it saw is unusable
        return "\n".join(["# fakegpu scenario generated by from_nvidia_smi.py",
                           "# source: %s" % source.replace("\n", " "), "gpus = %d" % len(lost)]
                          + _lost_lines(0, lost)) + "\n"
    if not text.lstrip().startswith("<"):
        # `nvidia-smi -q` text (or `nvidia-smi nvlink --status`): the same tree, from text
        text_module = _sibling("nvidia_smi_text")
        nvlink = text_module.nvlink_status_lines(text)
        if nvlink is not None:
            return "\n".join(["# fakegpu scenario lines generated by from_nvidia_smi.py",
                               "# source: %s" % source.replace("\n", " ")] + nvlink) + "\n"
        root = text_module.text_to_tree(text)
    else:
        root = _parse(text)
    if root.tag != "nvidia_smi_log":
        raise ValueError("not an nvidia-smi -q -x dump (root element %r)" % root.tag)
    gpus = root.findall("gpu")
    lines = [
        "# fakegpu scenario generated by from_nvidia_smi.py",
        "# source: %s" % source.replace("\n", " "),
        "gpus = %d" % (len(gpus) + len(lost)),
    ]
    driver = _txt(root, "driver_version")
    if driver and "#" not in driver and len(driver) < 80:
        lines.append("driver_version = %s" % driver)
    else:
        lines.append("driver_version =   # not in the dump: NVML answers NOT_SUPPORTED")
    cuda = _txt(root, "cuda_version")
    m = re.match(r"^(\d{1,4})\.(\d{1,2})", cuda or "")
    if m:
        lines.append("cuda_driver_version = %d" % (int(m.group(1)) * 1000 + int(m.group(2)) * 10))
    else:
        lines.append("cuda_driver_version = 0  # not in the dump")
    if root.get("fragment"):
        # an excerpt (no "GPU <pci>" header): its fields apply to every GPU of the default node
        lines = lines[:2] + ["# an excerpt: its fields override the defaults on every GPU"]
        lines.extend(_excerpt_lines(gpus[0]))
        return "\n".join(lines) + "\n"
    for n, gpu in enumerate(gpus):
        lines.append("")
        lines.append("# GPU %d: %s" % (n, gpu.get("id", "?")))
        lines.extend(_gpu_lines(n, gpu))
    lines.extend(_lost_lines(len(gpus), lost))
    return "\n".join(lines) + "\n"


def _sibling(name):
    """A module beside this script, whether it runs as a script or is imported by path."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _excerpt_lines(gpu):
    """`gpu.*.` lines for an excerpt: every block it shows, applied as the full-dump path
    applies it (ECC mode and counters, retired pages, remapped rows, fabric, PCIe replays,
    the remapper histogram); a block it does not show keeps the fake's default, and a block
    it shows as N/A changes nothing (an excerpt does not say what the board lacks)."""
    out = []

    def put(key, value):
        out.append("gpu.*.%s = %s" % (key, value))

    def ignore(*names):
        return None

    if gpu.find("ecc_mode") is not None or gpu.find("ecc_errors") is not None:
        _ecc_lines(gpu, put, ignore, excerpt=True)
    if gpu.find("retired_pages") is not None:
        shown = len(out)
        _retired_lines(gpu, put, ignore)
        if len(out) > shown and gpu.find("remapped_rows") is None:
            # Retired-page values come from a board that retires pages (pre-Ampere), which has
            # no row remapper: as a full dump of such a board replays (and NVML, reading the
            # retirement only where RemappedRows is NOT_SUPPORTED, sees the pages)
            put("unsupported", "RemappedRows,RowRemapperHistogram  # a page-retirement board")
    if gpu.find("remapped_rows") is not None:
        _remap_lines(gpu, put, ignore)
    fabric = []
    _fabric_lines(gpu, lambda key, value: fabric.append((key, value)), ignore)
    for key, value in fabric:
        # only what the excerpt shows: drop the keys _fabric_lines derives from absent blocks
        if key.startswith("fabric.") and gpu.find("fabric") is None:
            continue
        if key.startswith(("memory_temperature", "nvlink.links")):
            continue
        put(key, value)
    return out


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        sys.stderr.write("usage: from_nvidia_smi.py DUMP.xml  (prints a fakegpu scenario)\n")
        return 2
    try:
        sys.stdout.write(convert(argv[0]))
    except (OSError, ValueError, ET.ParseError) as e:
        sys.stderr.write("from_nvidia_smi: %s: %s\n" % (argv[0], e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
