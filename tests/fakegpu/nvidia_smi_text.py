"""`nvidia-smi -q` text (and `nvidia-smi nvlink --status`) for from_nvidia_smi.py.

    root = text_to_tree(open("nvidia-smi-q.txt").read())   # the tree `nvidia-smi -q -x` gives
    lines = nvlink_status_lines(open("nvlink-status.txt").read())  # scenario lines, or None

`nvidia-smi -q` prints one "Label : value" per line, nested by indentation, a "GPU <pci>" line
per GPU.  text_to_tree() reads that into a generic tree and copies the fields
from_nvidia_smi.py reads into an ElementTree with the XML dump's tag names, so the XML and the
text give the same scenario.  A field the text shows as N/A, or only relative to a limit
("T.Limit" temperatures of driver 535+), is left out and so becomes unsupported.  An excerpt
without a "GPU <pci>" line (a block pasted into an issue) becomes one GPU marked
fragment="1": its fields apply to every GPU of the default node.  A line where the poster cut
lines ("[...]", "...") is no field, and lines indented under it (their header was cut) are
dropped, never attached to the block above the cut.

Standard library only (Python >= 3.9).
"""
import re
import xml.etree.ElementTree as ET

__all__ = ["text_to_tree", "nvlink_status_lines", "parse_outline"]

# (text path, lower-case labels from the GPU down) -> XML path under <gpu>
FIELDS = {
    ("product name",): "product_name",
    ("gpu uuid",): "uuid",
    ("serial number",): "serial",
    ("minor number",): "minor_number",
    ("persistence mode",): "persistence_mode",
    ("mig mode", "current"): "mig_mode/current_mig",
    ("gpu recovery action",): "gpu_recovery_action",
    ("gpu reset status", "reset required"): "gpu_reset_status/reset_required",
    ("gpu reset status", "drain and reset recommended"): "gpu_reset_status/drain_and_reset_recommended",
    ("pci", "bus id"): "pci/pci_bus_id",
    ("pci", "device id"): "pci/pci_device_id",
    ("pci", "sub system id"): "pci/pci_sub_system_id",
    ("pci", "gpu link info", "pcie generation", "max"): "pci/pci_gpu_link_info/pcie_gen/max_link_gen",
    ("pci", "gpu link info", "pcie generation", "current"): "pci/pci_gpu_link_info/pcie_gen/current_link_gen",
    ("pci", "gpu link info", "link width", "max"): "pci/pci_gpu_link_info/link_widths/max_link_width",
    ("pci", "gpu link info", "link width", "current"): "pci/pci_gpu_link_info/link_widths/current_link_width",
    ("pci", "replays since reset"): "pci/replay_counter",
    ("fb memory usage", "total"): "fb_memory_usage/total",
    ("fb memory usage", "reserved"): "fb_memory_usage/reserved",
    ("fb memory usage", "used"): "fb_memory_usage/used",
    ("ecc mode", "current"): "ecc_mode/current_ecc",
    ("ecc mode", "pending"): "ecc_mode/pending_ecc",
    ("retired pages", "single bit ecc"): "retired_pages/multiple_single_bit_retirement/retired_count",
    ("retired pages", "double bit ecc"): "retired_pages/double_bit_retirement/retired_count",
    ("retired pages", "pending page blacklist"): "retired_pages/pending_blacklist",
    ("retired pages", "pending page retirement"): "retired_pages/pending_retirement",
    ("remapped rows", "correctable error"): "remapped_rows/remapped_row_corr",
    ("remapped rows", "uncorrectable error"): "remapped_rows/remapped_row_unc",
    ("remapped rows", "pending"): "remapped_rows/remapped_row_pending",
    ("remapped rows", "remapping failure occurred"): "remapped_rows/remapped_row_failure",
    ("temperature", "gpu current temp"): "temperature/gpu_temp",
    ("temperature", "gpu shutdown temp"): "temperature/gpu_temp_max_threshold",
    ("temperature", "gpu slowdown temp"): "temperature/gpu_temp_slow_threshold",
    ("temperature", "memory current temp"): "temperature/memory_temp",
    ("temperature", "memory max operating temp"): "temperature/gpu_temp_max_mem_threshold",
    ("gpu power readings", "power draw"): "gpu_power_readings/power_draw",
    ("power readings", "power draw"): "power_readings/power_draw",
    ("fabric", "state"): "fabric/state",
    ("fabric", "status"): "fabric/status",
    ("fabric", "cliqueid"): "fabric/cliqueId",
    ("fabric", "clusteruuid"): "fabric/clusterUuid",
    ("fabric", "health", "bandwidth"): "fabric/health/bandwidth",
    ("fabric", "health", "summary"): "fabric/health/summary",
    ("fabric", "health", "route recovery in progress"): "fabric/health/route_recovery_in_progress",
    ("fabric", "health", "route unhealthy"): "fabric/health/route_unhealthy",
}
for _bucket in ("max", "high", "partial", "low", "none"):
    FIELDS[("remapped rows", "bank remap availability histogram", _bucket)] = (
        "remapped_rows/remapped_row_histogram/row_remap_histogram_" + _bucket)
for _kind in ("volatile", "aggregate"):
    for _label, _tag in (("sram correctable", "sram_correctable"), ("dram correctable", "dram_correctable"),
                         ("sram uncorrectable", "sram_uncorrectable"), ("dram uncorrectable", "dram_uncorrectable"),
                         ("single bit", "single_bit"), ("double bit", "double_bit")):
        FIELDS[("ecc errors", _kind, _label)] = "ecc_errors/%s/%s" % (_kind, _tag)
        FIELDS[("ecc errors", _kind, _label, "total")] = "ecc_errors/%s/%s/total" % (_kind, _tag)
FIELDS[("ecc errors", "aggregate", "sram threshold exceeded")] = "ecc_errors/aggregate/sram_threshold_exceeded"
# "Clocks Event Reasons" (driver 535+) or "Clocks Throttle Reasons" (older): label -> XML suffix
CLOCK_REASONS = {"idle": "gpu_idle", "applications clocks setting": "applications_clocks_setting",
                 "sw power cap": "sw_power_cap", "hw slowdown": "hw_slowdown", "sync boost": "sync_boost",
                 "sw thermal slowdown": "sw_thermal_slowdown", "hw thermal slowdown": "hw_thermal_slowdown",
                 "hw power brake slowdown": "hw_power_brake_slowdown",
                 "display clock setting": "display_clocks_setting"}

_LINE = re.compile(r"^(?P<indent>[ \t]*)(?P<label>[^:]+?)\s*(?::\s?(?P<value>.*))?$")
CUT = "[...]"  # the label of a cut in the outline
_CUT = re.compile(r"^\s*(\[\s*(\.\.\.|…)\s*\]|\.\.\.|…)\s*$")
_GPU = re.compile(r"^GPU\s+(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")


class Node:
    __slots__ = ("label", "value", "children")

    def __init__(self, label, value):
        self.label, self.value, self.children = label, value, []


def parse_outline(text):
    """The indented "Label : value" lines as a tree of Node (root label "")."""
    root = Node("", None)
    stack = [(-1, root)]
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith(("#", "--", "==")):
            continue
        m = _LINE.match(raw.expandtabs(8)[:4096])
        if m is None:
            continue
        indent = len(m["indent"])
        label = m["label"].strip()
        value = m["value"].strip() if m["value"] is not None else None
        if _CUT.match(raw):
            # where the poster cut lines: no field.  It closes the blocks at its depth, and what
            # follows it indented deeper lost its header to the cut (a GPU's, Aggregate's, ...):
            # it is held under the cut, which no field path names, and so dropped
            label, value = CUT, None
        while stack[-1][0] >= indent:
            stack.pop()
        node = Node(label, value or None)
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


def _put(gpu, path, value):
    elem = gpu
    for tag in path.split("/"):
        child = elem.find(tag)
        if child is None:
            child = ET.SubElement(elem, tag)
        elem = child
    elem.text = value


def _walk(node, path, gpu):
    for child in node.children:
        if child.label == CUT:
            continue  # a cut, and what lost its header to it
        key = path + (child.label.lower(),)
        if key[:1] == ("processes",) and len(key) == 1:
            _processes(child, gpu)
            continue
        if key[0] in ("clocks event reasons", "clocks throttle reasons") and len(key) >= 2:
            reason = CLOCK_REASONS.get(key[-1])
            if reason and child.value:
                prefix = "clocks_event_reason" if key[0].startswith("clocks event") else "clocks_throttle_reason"
                _put(gpu, "%ss/%s_%s" % (prefix, prefix, reason), child.value)
        elif key in FIELDS and child.value is not None:
            _put(gpu, FIELDS[key], child.value)
        elif key[:3] in (("ecc errors", "volatile", "sram uncorrectable parity"),
                         ("ecc errors", "volatile", "sram uncorrectable sec-ded"),
                         ("ecc errors", "aggregate", "sram uncorrectable parity"),
                         ("ecc errors", "aggregate", "sram uncorrectable sec-ded")) and child.value:
            _add_int(gpu, "ecc_errors/%s/sram_uncorrectable" % key[1], child.value)
        _walk(child, key, gpu)


def _add_int(gpu, path, value):
    """Driver 535 splits SRAM uncorrectable into parity and SEC-DED: NVML's total is the sum."""
    if not re.match(r"^\d+$", value):
        return
    old = gpu.find(path)
    total = int(value) + (int(old.text) if old is not None and old.text and old.text.isdigit() else 0)
    _put(gpu, path, str(total))


def _processes(node, gpu):
    """Process blocks: each starts at "GPU instance ID" or "Process ID"."""
    procs = ET.SubElement(gpu, "processes")
    current = None

    def flat(n):  # driver 535 nests Type / Name / Used GPU Memory under Process ID
        for c in n.children:
            yield c
            yield from flat(c)

    for child in flat(node):
        label = child.label.lower()
        if label == "gpu instance id" or (label == "process id" and (current is None or current.find("pid") is not None)):
            current = ET.SubElement(procs, "process_info")
        if current is None:
            continue
        tag = {"process id": "pid", "type": "type", "used gpu memory": "used_memory",
               "name": "process_name"}.get(label)
        if tag and child.value:
            _put(current, tag, child.value)


def text_to_tree(text):
    """An <nvidia_smi_log> tree with the XML dump's tags, from `nvidia-smi -q` text.

    Raises:
        ValueError: nothing in the text looks like nvidia-smi -q output.
    """
    outline = parse_outline(text)
    root = ET.Element("nvidia_smi_log")
    gpus = [n for n in outline.children if _GPU.match(n.label + (":" + n.value if n.value else ""))
            or _GPU.match(n.label)]
    for top in outline.children:
        if top.label.lower() == "driver version" and top.value:
            ET.SubElement(root, "driver_version").text = top.value
        elif top.label.lower() == "cuda version" and top.value:
            ET.SubElement(root, "cuda_version").text = top.value
    if gpus:
        for node in gpus:
            full = node.label + (":" + node.value if node.value else "")
            m = _GPU.match(full) or _GPU.match(node.label)
            gpu = ET.SubElement(root, "gpu", id=m["pci"])
            _walk(node, (), gpu)
        return root
    known = {path[0] for path in FIELDS}
    if not any(n.label.lower() in known for n in outline.children):
        raise ValueError("neither nvidia-smi -q -x XML nor nvidia-smi -q text")
    root.set("fragment", "1")
    _walk(outline, (), ET.SubElement(root, "gpu", id="excerpt"))
    return root


# NVLink links per GPU by NVIDIA's specifications, for a status that says all are inactive
# without listing them: A100 12 (NVLink3), H100/H200/B200/GB200 18 (NVLink4/5).
_LINKS_BY_NAME = (("A100", 12), ("H100", 18), ("H200", 18), ("H20", 18), ("B200", 18), ("GB200", 18),
                  ("B300", 18), ("GB300", 18))
_NVLINK_GPU = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?)(?: \(UUID: (?P<uuid>[^)]*)\))?\s*$")
_NVLINK_LINK = re.compile(r"^\s*Link (?P<link>\d+): (?P<state>.+?)\s*$")


def nvlink_status_lines(text):
    """Scenario lines (gpu.N.nvlink.links / .down) for `nvidia-smi nvlink --status`, or None
    when the text is not that.  "all links are inactive" marks every link of the GPU down."""
    lines, gpu, links, down, seen = [], None, 0, [], False

    def flush():
        if gpu is not None and links:
            lines.append("gpu.%d.nvlink.links = %d" % (gpu, links))
            lines.append("gpu.%d.nvlink.down = %s" % (gpu, ",".join(map(str, down))))

    name = ""
    for raw in text.splitlines():
        m = _NVLINK_GPU.match(raw.strip())
        if m and not raw.startswith((" ", "\t")):
            flush()
            gpu, links, down, name = int(m["index"]), 0, [], m["name"]
            continue
        link = _NVLINK_LINK.match(raw)
        if link and gpu is not None:
            seen = True
            links = max(links, int(link["link"]) + 1)
            if "inactive" in link["state"].lower():
                down.append(int(link["link"]))
            continue
        if gpu is not None and "all links are inactive" in raw.lower():
            seen = True
            count = next((n for key, n in reversed(_LINKS_BY_NAME) if key in name), None)
            lines.append("# GPU %d (%s): NVML says all links are inactive" % (gpu, name))
            if count is not None:
                lines.append("gpu.%d.nvlink.links = %d" % (gpu, count))
            lines.append("gpu.%d.nvlink.down = %s" % (gpu, ",".join(str(i) for i in range(count or 36))))
            gpu = None
    flush()
    return lines if seen else None
