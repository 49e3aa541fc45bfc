"""Slurm's gres indices -> GPUs, the way slurmd numbers them.

SLURM_JOB_GPUS (and CUDA_VISIBLE_DEVICES in a prolog) hold gres *indices*: positions in the
node's gres/gpu device list, not /dev/nvidiaN minor numbers.  With `File=/dev/nvidia[0-2,4-7]`
(GPU 3 taken out after it failed) the job on /dev/nvidia4 gets SLURM_JOB_GPUS=3.

    layout = read_layout("/etc/slurm/gres.conf", "gpu-a", state_dir="/var/lib/gpu-healthcheck")
    nvml_indices, error = map_gres_indices(("3",), layout, snapshot.gpus)   # decide.gpumap

How slurmd builds the list (Slurm 22.05 source, src/common/gres.c and
src/plugins/gres/gpu/gres_gpu.c; the same in master's src/interfaces/gres.c):
- `_merge_config` / `_merge_gres2` walk slurm.conf's Gres= of the node type by type (in its
  order; an untyped `gpu:8` takes every gres.conf gpu record) and take the gres.conf records
  of that type in file order;
- `common_node_config_load` (`gres_node_config_load` in master, `_foreach_fill_in_gres_devices`)
  expands each record's File= as a hostlist (`hostlist_shift`: written order) and gives each
  file the next index; a MultipleFiles= record is one index for several files;
  a gres.conf record of a type slurm.conf does not give this node, and the files past a
  type's count, are dropped ("Ignoring extra GRES"): they are no gres index at all;
- with a system GPU list (AutoDetect=nvml, `gpu_p_get_system_gpu_list` in gpu_nvml.c, which
  enumerates NVML devices by index and records that order in Links), `_merge_system_gres_conf`
  keeps the detected GPUs that match a configured one and sorts them with
  `_sort_gpu_by_links_order`: NVML's enumeration order (PCI bus order); configured files that
  were not detected follow.  AutoDetect=nvidia (24.11's gpu/nvidia, reading
  /proc/driver/nvidia/gpus) sets no Links, so its GPUs stay sorted by device file name
  (`_sort_gpu_by_file`); AutoDetect=full (26.05) tries nvml, nvidia, rsmi, oneapi and nrt in
  turn and keeps the first that finds GPUs (`_gpu_plugin_init_full` in src/interfaces/gpu.c).
  decide/gpumap.py maps an index only where every order the node's slurmd may use agrees.
Where we cannot prove the order (several types without slurm.conf's order, MultipleFiles,
records without File, another vendor's AutoDetect), an index is unmappable: the prolog
reports `unknown` for it, probes nothing for it and never drains for it.

Both files are read as slurmd reads them, `Include` lines followed (read/slurmconf.py).  The
parsed layout is cached in state_dir keyed on every file's identity (device, inode, mtime,
size) and the node name, so a prolog re-reads them only after one changes.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Dict, List, Optional, Sequence, Tuple

from ..model import NVIDIA_AUTODETECT, OTHER_VENDORS, autodetect_kind
from ..model import GresLayout
from .slurmconf import (SHARING, ConfLine, ConfReadError, GresConfError, expand_hostlist,  # noqa: F401  (re-exported)
                        gpu_counts, include_name, logical_lines, node_gres, read_conf, shared_gres,
                        unchanged)

CACHE = "gres-map.json"


# --- gres.conf ---------------------------------------------------------------------------

def _records(lines: Sequence[ConfLine]) -> List[Dict[str, str]]:
    """gres.conf lines as {lower-case key: value}, "#at" saying where each is."""
    records = []
    for line in lines:
        at = f"{line.path} line {line.number}"
        if include_name(line.text) is not None:
            raise GresConfError(f"{at}: Include is followed only where gres.conf is read from "
                                f"its file (read_layout)")
        record: Dict[str, str] = {}
        for word in line.text.split():
            key, eq, value = word.partition("=")
            if not eq:
                raise GresConfError(f"{at}: {word!r} is not KEY=VALUE")
            key = key.lower()
            record["file" if key == "files" else key] = value  # slurmd takes Files= for File=
        record["#at"] = at
        records.append(record)
    return records


def parse_gres_conf(text: str, node: str, source: str = "gres.conf",
                    slurm_gres: Optional[Sequence[Tuple[Optional[str], int]]] = None) -> GresLayout:
    """This node's gres/gpu files in slurmd's index order, from gres.conf's text (pure; an
    Include line makes the layout an error here: read_layout follows it)."""
    return parse_gres_lines(logical_lines(text, source), node, source, slurm_gres)


def parse_gres_lines(lines: Sequence[ConfLine], node: str, source: str = "gres.conf",
                     slurm_gres: Optional[Sequence[Tuple[Optional[str], int]]] = None) -> GresLayout:
    """This node's gres/gpu files in slurmd's index order (pure).

    slurm_gres: slurm.conf's Gres= of this node as (type or None, count) for gpu, in order
    (None: slurm.conf unknown); it orders several types, keeps only the first COUNT files of
    each type and drops the records of a type it does not give this node, as slurmd does.
    """
    try:
        records = _records(lines)
        autodetect, local_autodetect = _autodetect(records, node)
        gpu: List[Dict[str, str]] = []
        shared = set()
        for rec in records:
            if "nodename" in rec and node not in expand_hostlist(rec["nodename"]):
                continue
            name = rec.get("name", "").lower()  # slurmd matches gres names in any case
            if name == "gpu":
                gpu.append(rec)
            elif name in SHARING:
                shared.add(name)
    except GresConfError as exc:
        return GresLayout(source, error=f"{source}: {exc}")
    autodetect = local_autodetect or autodetect
    kind = autodetect_kind(autodetect)
    typed_autodetect = kind in NVIDIA_AUTODETECT and any("type" in r for r in gpu)
    uncertain = None
    if slurm_gres is not None and any(t is None for t, _ in slurm_gres) and any(t for t, _ in slurm_gres):
        uncertain = "slurm.conf's Gres= mixes typed and untyped gpu counts for this node"
    try:
        kept = _merge_slurm_conf(gpu, slurm_gres)
        if kept is None:  # slurm.conf unknown: gres.conf order (several types need its order)
            kept = [(rec, _files(rec), len(_files(rec)) if "file" in rec else _count(rec)) for rec in gpu]
    except GresConfError as exc:
        return GresLayout(source, error=f"{source}: {exc}")
    if slurm_gres is None:
        if len({(r.get("type") or "").lower() for r in gpu}) > 1 and not typed_autodetect:
            uncertain = uncertain or ("several Type= values and no typed Gres= for this node "
                                      "in slurm.conf to order them")
    if slurm_gres is not None and not any(t for t, _ in slurm_gres):
        typed_autodetect = False  # an untyped gpu:N takes the records' types off (`_match_type`)
    for rec, _, _ in kept:
        if "multiplefiles" in rec:
            uncertain = f"{rec['#at']}: MultipleFiles= gives one index to several files"
        elif "file" not in rec and not typed_autodetect:
            uncertain = f"{rec['#at']}: a gpu record without File= has no device to map to"
    if kind in OTHER_VENDORS:
        uncertain = f"AutoDetect={autodetect} is not NVIDIA's: its order is not NVML's"
    files: List[str] = []
    typed: List[Tuple[str, int, Tuple[str, ...]]] = []
    for rec, names, count in kept:
        files.extend(names)
        if typed_autodetect:
            typed.append((rec.get("type", ""), count, tuple(names)))
    return GresLayout(source, files=tuple(files), autodetect=autodetect, uncertain=uncertain,
                      typed=tuple(typed), shared=tuple(sorted(shared)))


def _files(rec: Dict[str, str]) -> List[str]:
    return expand_hostlist(rec["file"]) if "file" in rec else []


def _count(rec: Dict[str, str]) -> int:
    """A record's Count= (slurmd: 1 when absent; with File=, the number of files)."""
    count = rec.get("count", "")
    return int(count) if count.isdigit() else 1


def _merge_slurm_conf(gpu: List[Dict[str, str]], slurm_gres: Optional[Sequence[Tuple[Optional[str], int]]]
                      ) -> Optional[List[Tuple[Dict[str, str], List[str], int]]]:
    """The gres.conf gpu records slurmd keeps, in its order, each with the files and count it keeps
    (`_merge_config` / `_merge_gres2` / `_match_type`, Slurm 22.05 src/common/gres.c): for each
    gpu entry of slurm.conf's Gres= in turn, the unused records of that type (any type for an
    untyped entry; case-insensitive) in file order, until its count is used up, the last one
    cut to what is left (`_set_file_subset`).  A record no entry takes is dropped: "A line in
    gres.conf for GRES gpu:TYPE has N more configured than expected in slurm.conf. Ignoring
    extra GRES." (seen with `slurmd -G`, 22.05).  None where slurm.conf is unknown.

    Raises:
        GresConfError: a File= that is no hostlist.
    """
    if slurm_gres is None:
        return None
    left = list(gpu)
    kept: List[Tuple[Dict[str, str], List[str], int]] = []
    for kind, count in slurm_gres:
        while count > 0:
            match = next((r for r in left if kind is None
                          or (r.get("type") or "").lower() == kind.lower()), None)
            if match is None:
                break  # the rest of this count has no device file: no gres index to map
            left.remove(match)
            names = _files(match)
            size = len(names) if "file" in match else _count(match)
            kept.append((match, names[:count], min(size, count)))
            count -= min(size, count)
    return kept


def _autodetect(records: List[Dict[str, str]], node: str) -> Tuple[Optional[str], Optional[str]]:
    """(global, node-local) AutoDetect as slurmd 22.05 takes them (gres.c, the issue's
    src/common/gres.c:1178-1211): a node-local value (a NodeName= line naming this node) wins
    over the global one wherever either is written; an in-line AutoDetect on a line without
    NodeName= is ignored (slurmd: "In-line AutoDetect requires NodeName to take effect").
    tests/readers/test_gres_slurmd.py checks each case against a real `slurmd -G`."""
    found_global: Optional[str] = None
    local: Optional[str] = None
    for rec in records:
        if "autodetect" not in rec:
            continue
        value = rec["autodetect"].lower()
        if "nodename" in rec:
            if node in expand_hostlist(rec["nodename"]):
                local = value
        elif set(rec) <= {"autodetect", "#at"}:
            found_global = value
    return found_global, local


def slurm_conf_shared(text: str, node: str) -> Tuple[str, ...]:
    """The sharing gres (mps, shard) in Gres= on slurm.conf's NodeName line for `node` (pure)."""
    return shared_gres(node_gres(logical_lines(text, "slurm.conf"), node))


def slurm_conf_gres(text: str, node: str) -> Optional[List[Tuple[Optional[str], int]]]:
    """The gpu entries of Gres= on slurm.conf's NodeName line for `node`, in order (pure)."""
    return gpu_counts(node_gres(logical_lines(text, "slurm.conf"), node))


# --- reading, with a cache ---------------------------------------------------------------

def gres_conf_path(configured: Optional[str], environ: Dict[str, str]) -> str:
    """Where slurmd reads gres.conf: beside slurm.conf (`get_extra_conf_path`), i.e. the
    directory of SLURM_CONF, else /etc/slurm.  The config key `gres_conf` overrides it
    (config-less sites: slurmd's conf-cache)."""
    if configured:
        return configured
    conf = environ.get("SLURM_CONF")
    return os.path.join(os.path.dirname(conf) if conf else "/etc/slurm", "gres.conf")


def slurm_conf_path(gres_conf: str) -> str:
    """slurm.conf beside gres.conf (slurmd reads both from one directory)."""
    return os.path.join(os.path.dirname(gres_conf), "slurm.conf")


def device_minors(files: Sequence[str]) -> Tuple[Tuple[Optional[int], ...], Optional[str]]:
    """Each File='s device number as slurmd's cgroup code takes it: st_rdev's minor after
    following links, so `/dev/gpu/slot0 -> /dev/nvidia1` is GPU minor 1.  A file that cannot be
    stat'ed (or is no character device) falls back to its name's trailing digits, and the
    returned note says so."""
    from ..model import trailing_number

    minors: List[Optional[int]] = []
    guessed: List[str] = []
    for name in files:
        try:
            st = os.stat(name)
            if not stat.S_ISCHR(st.st_mode):
                raise OSError(f"{name} is not a character device")
            minors.append(os.minor(st.st_rdev))
        except OSError:
            minors.append(trailing_number(name))
            guessed.append(name)
    note = (f"cannot stat {', '.join(guessed)} as a device: took the device number from the "
            f"name's digits") if guessed else None
    return tuple(minors), note


def read_layout(path: str, node: str, state_dir: Optional[str] = None) -> GresLayout:
    """This node's layout from gres.conf and slurm.conf's Gres= beside it (each with its
    Includes), from the cache when no file read has changed; the File= device numbers are
    stat'ed at every call."""
    layout = _read_layout(path, node, state_dir)
    if layout.error or not layout.files:
        return layout
    minors, note = device_minors(layout.files)
    return layout._replace(minors=minors, note=note)


def _layout_json(layout: GresLayout) -> dict:
    return {"files": list(layout.files), "autodetect": layout.autodetect, "uncertain": layout.uncertain,
            "typed": [list(t) for t in layout.typed], "shared": list(layout.shared)}


def _cached(state_dir: str, path: str, node: str) -> Optional[GresLayout]:
    """The cached layout where it was made for this node and path from files that are all
    unchanged; None otherwise (a missing or damaged cache is rebuilt)."""
    from ..safefile import read_file

    try:
        cached = json.loads((read_file(state_dir, CACHE) or b"null").decode())
        if not (isinstance(cached, dict) and cached.get("node") == node and cached.get("path") == path
                and cached.get("files") and unchanged(cached["files"])):
            return None
        layout = cached["layout"]
        return GresLayout(path, files=tuple(layout["files"]), autodetect=layout["autodetect"],
                          uncertain=layout["uncertain"],
                          typed=tuple((t, c, tuple(f)) for t, c, f in layout["typed"]),
                          shared=tuple(str(n) for n in layout["shared"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _read_layout(path: str, node: str, state_dir: Optional[str]) -> GresLayout:
    from ..safefile import atomic_write

    if state_dir:
        hit = _cached(state_dir, path, node)
        if hit is not None:
            return hit
    conf_dir = os.path.dirname(path)
    try:
        lines, files = read_conf(path, conf_dir)
    except ConfReadError as exc:
        return GresLayout(path, error=str(exc))
    slurm_conf = slurm_conf_path(path)
    slurm_items: Optional[List[str]] = None
    if os.path.exists(slurm_conf):
        try:
            slurm_lines, slurm_files = read_conf(slurm_conf, conf_dir, cluster_names=True)
        except ConfReadError as exc:
            # slurmd does not start with this slurm.conf: nothing it numbers can be known
            return GresLayout(path, error=str(exc))
        files += slurm_files
        slurm_items = node_gres(slurm_lines, node)
    else:
        files.append((slurm_conf, None))  # its appearing later must rebuild the cache
    layout = parse_gres_lines(lines, node, path, gpu_counts(slurm_items))
    # mps may be counted in slurm.conf alone (Gres=gpu:4,mps:400 with AutoDetect=nvml)
    layout = layout._replace(shared=tuple(sorted(set(layout.shared) | set(shared_gres(slurm_items)))))
    if state_dir and layout.error is None:
        try:
            atomic_write(state_dir, CACHE, json.dumps(
                {"node": node, "path": path, "files": [[p, list(i) if i else None] for p, i in files],
                 "layout": _layout_json(layout)}).encode(), durable=False)
        except OSError:
            pass  # the cache only saves a parse
    return layout
