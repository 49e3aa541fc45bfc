#!/usr/bin/env python3
"""Turn a real ``nvidia-smi -q -x`` dump into a fakegpu scenario.

    python3 tests/fakegpu/from_nvidia_smi.py DUMP.xml > node.scenario

Every GPU of the dump becomes ``gpu.N.*`` lines, in dump order.  A field the
dump shows as ``N/A`` (or leaves out) becomes a ``gpu.N.unsupported`` entry
naming the NVML query that would fail with NOT_SUPPORTED on that board.

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
    if not value or value.upper() in ("N/A", "NOT AVAILABLE", "[N/A]", "UNKNOWN ERROR"):
        return None
    return value


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


def _ecc_totals(gpu, kind):
    """(corrected, uncorrected) of ecc_errors/<kind>, each None if N/A.

    Driver >= 520 (dump v12) splits SRAM and DRAM; older drivers give
    single_bit/total and double_bit/total.  NVML's total is the sum over
    every location.
    """
    base = gpu.find("ecc_errors/" + kind)
    if base is None:
        return None, None
    if base.find("single_bit") is not None or base.find("double_bit") is not None:
        return _int(base, "single_bit/total"), _int(base, "double_bit/total")

    def total(suffix):
        values = [_int(base, "%s_%s" % (loc, suffix)) for loc in ("sram", "dram")]
        values = [v for v in values if v is not None]
        return sum(values) if values else None

    return total("correctable"), total("uncorrectable")


def _pci_bus_id(gpu):
    for value in (_txt(gpu, "pci/pci_bus_id"), gpu.get("id")):
        if value:
            m = _PCI_RE.match(value.strip())
            if m:
                return "%08X:%s:%s.0" % (int(m.group(1), 16), m.group(2).upper(), m.group(3).upper())
    return None


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
    uuid = _txt(gpu, "uuid")
    if uuid and _UUID_RE.match(uuid):
        put("uuid", uuid)
    elif uuid:
        out.append("# gpu.%d: uuid %r is not GPU-<hex>: default kept" % (n, uuid))
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
    minor = _int(gpu, "minor_number")
    if minor is not None:
        put("minor_number", minor)
    else:
        unsup("MinorNumber")

    # ECC: mode, then counters (counters exist only with ECC enabled).
    ecc = _flag(gpu, "ecc_mode/current_ecc")
    if ecc is None:
        put("ecc_mode", "unsupported")
        unsup("EccMode", "TotalEccErrors", "MemoryErrorCounter")
    else:
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

    # Page retirement (pre-Ampere) and row remapping (Ampere and later).
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
    remap = gpu.find("remapped_rows")
    if remap is None or _txt(remap, "remapped_row_corr") is None:
        unsup("RemappedRows")
    else:
        put("remap.correctable", _int(remap, "remapped_row_corr") or 0)
        put("remap.uncorrectable", _int(remap, "remapped_row_unc") or 0)
        put("remap.pending", _flag(remap, "remapped_row_pending") or 0)
        put("remap.failure", _flag(remap, "remapped_row_failure") or 0)

    # Memory (MiB).
    total = _int(gpu, "fb_memory_usage/total")
    if total is None:
        unsup("MemoryInfo")
    else:
        put("memory.total_mib", total)
        put("memory.used_mib", _int(gpu, "fb_memory_usage/used") or 0)
        put("memory.reserved_mib", _int(gpu, "fb_memory_usage/reserved") or 0)

    # Compute processes only: graphics ones (Xorg, type G) are not what
    # nvmlDeviceGetComputeRunningProcesses lists.
    procs = []
    for p in gpu.findall("processes/process_info"):
        ptype = (_txt(p, "type") or "").upper()
        pid = _int(p, "pid")
        if "C" in ptype and pid is not None:
            procs.append("%d:%d" % (pid, _int(p, "used_memory") or 0))
    if procs:
        put("processes", ",".join(procs[:64]))

    temp = _int(gpu, "temperature/gpu_temp")
    if temp is None:
        unsup("Temperature")
    else:
        put("temperature_c", temp)
    slow = _int(gpu, "temperature/gpu_temp_slow_threshold")
    shut = _int(gpu, "temperature/gpu_temp_max_threshold")
    if slow is None or shut is None:
        unsup("TemperatureThreshold")
    if slow is not None:
        put("temperature.slowdown_c", slow)
    if shut is not None:
        put("temperature.shutdown_c", shut)

    power = _float(gpu, "gpu_power_readings/power_draw")
    if power is None:
        power = _float(gpu, "power_readings/power_draw")
    # A draw of 306+ digits makes power * 1000 inf, and int(round(inf)) raised OverflowError
    # past main()'s handler (found by tests/fuzz/fuzz_xml_replay.py): no board reports that.
    if power is None or not math.isfinite(power * 1000):
        unsup("PowerUsage")
    else:
        put("power_mw", int(round(power * 1000)))

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

    put("unsupported", ",".join(unsupported))
    return out


def convert(path_or_text):
    """Scenario text for a dump given as a path, XML text or bytes."""
    if isinstance(path_or_text, bytes):
        text, source = path_or_text.decode("utf-8", "replace"), "<bytes>"
    elif isinstance(path_or_text, os.PathLike) or (
        isinstance(path_or_text, str) and "<" not in path_or_text
    ):
        source = os.fspath(path_or_text)
        with open(source, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    else:
        text, source = path_or_text, "<text>"
    root = _parse(text)
    if root.tag != "nvidia_smi_log":
        raise ValueError("not an nvidia-smi -q -x dump (root element %r)" % root.tag)
    gpus = root.findall("gpu")
    lines = [
        "# fakegpu scenario generated by from_nvidia_smi.py",
        "# source: %s" % source.replace("\n", " "),
        "gpus = %d" % len(gpus),
    ]
    driver = _txt(root, "driver_version")
    if driver and "#" not in driver and len(driver) < 80:
        lines.append("driver_version = %s" % driver)
    cuda = _txt(root, "cuda_version")
    m = re.match(r"^(\d+)\.(\d+)", cuda or "")
    if m:
        lines.append("cuda_driver_version = %d" % (int(m.group(1)) * 1000 + int(m.group(2)) * 10))
    for n, gpu in enumerate(gpus):
        lines.append("")
        lines.append("# GPU %d: %s" % (n, gpu.get("id", "?")))
        lines.extend(_gpu_lines(n, gpu))
    return "\n".join(lines) + "\n"


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
