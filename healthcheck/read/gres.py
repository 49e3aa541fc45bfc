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
- with a system GPU list (AutoDetect=nvml, `gpu_p_get_system_gpu_list` in gpu_nvml.c, which
  enumerates NVML devices by index and records that order in Links), `_merge_system_gres_conf`
  keeps the detected GPUs that match a configured one and sorts them with
  `_sort_gpu_by_links_order`: NVML's enumeration order (PCI bus order); configured files that
  were not detected follow.
Where we cannot prove the order (several types without slurm.conf's order, MultipleFiles,
records without File, AutoDetect with Type=, another vendor's AutoDetect), an index is
unmappable: the prolog reports `unknown` for it, probes nothing for it and never drains for it.

The parsed gres.conf is cached in state_dir keyed on the file's identity (device, inode,
mtime, size) and the node name, so a prolog re-reads it only after it changes.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Dict, List, Optional, Sequence, Tuple

from ..model import GresLayout

CACHE = "gres-map.json"
MAX_CONF_BYTES = 1 << 20  # a gres.conf is a few lines
MAX_EXPANSION = 4096  # files or hosts one hostlist may name
# the gres plugins that let several jobs use one GPU (slurm.conf GresTypes, gres.conf Name=)
SHARING = ("mps", "shard")


class GresConfError(ValueError):
    """gres.conf (or slurm.conf's Gres=) says something we cannot read; names the part."""


# --- hostlists ---------------------------------------------------------------------------

def _split_top(text: str) -> List[str]:
    """Split on commas outside brackets ("a[0-2,4],b" -> ["a[0-2,4]", "b"])."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise GresConfError(f"unbalanced ']' in {text!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise GresConfError(f"unbalanced '[' in {text!r}")
    parts.append(text[start:])
    return [p for p in (p.strip() for p in parts) if p]


_BRACKET_RE = re.compile(r"^(?P<pre>[^\[\]]*)\[(?P<ranges>[^\[\]]+)\](?P<post>[^\[\]]*)$")


def expand_hostlist(text: str) -> List[str]:
    """Slurm's hostlist expansion, in written order: "/dev/nvidia[0-2,4]" -> 4 names.

    Raises:
        GresConfError: malformed brackets or ranges, or more than MAX_EXPANSION names.
    """
    names: List[str] = []
    for item in _split_top(text):
        m = _BRACKET_RE.match(item)
        if not m:
            if "[" in item or "]" in item:
                raise GresConfError(f"cannot read the hostlist {item!r}")
            names.append(item)
            continue
        for part in m["ranges"].split(","):
            low, _, high = part.strip().partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                raise GresConfError(f"bad range {part!r} in {item!r}")
            width = len(low)
            first, last = int(low), int(high) if high else int(low)
            if last < first or last - first >= MAX_EXPANSION:
                raise GresConfError(f"bad range {part!r} in {item!r}")
            names.extend(f"{m['pre']}{n:0{width}d}{m['post']}" for n in range(first, last + 1))
        if len(names) > MAX_EXPANSION:
            raise GresConfError(f"{text!r} names more than {MAX_EXPANSION} entries")
    return names


# --- gres.conf ---------------------------------------------------------------------------

def _records(text: str) -> List[Dict[str, str]]:
    """gres.conf lines as {lower-case key: value}; `#` comments, `\\` continuations."""
    records = []
    joined = re.sub(r"\\\n", " ", text)
    for number, line in enumerate(joined.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        record: Dict[str, str] = {}
        for word in line.split():
            key, eq, value = word.partition("=")
            if not eq:
                raise GresConfError(f"line {number}: {word!r} is not KEY=VALUE")
            record[key.lower()] = value
        record["#line"] = str(number)
        records.append(record)
    return records


def parse_gres_conf(text: str, node: str, source: str = "gres.conf",
                    slurm_gres: Optional[Sequence[Tuple[Optional[str], int]]] = None) -> GresLayout:
    """This node's gres/gpu files in slurmd's index order (pure).

    slurm_gres: slurm.conf's Gres= of this node as (type or None, count) for gpu, in order;
    it orders several types, and each type keeps only its first COUNT files.
    """
    try:
        records = _records(text)
        autodetect, local_autodetect = _autodetect(records, node)
        gpu: List[Dict[str, str]] = []
        shared = set()
        for rec in records:
            if "include" in rec:
                return GresLayout(source, uncertain=f"line {rec['#line']}: Include= is not followed")
            if "nodename" in rec and node not in expand_hostlist(rec["nodename"]):
                continue
            if rec.get("name") == "gpu":
                gpu.append(rec)
            elif rec.get("name") in SHARING:
                shared.add(rec["name"])
    except GresConfError as exc:
        return GresLayout(source, error=f"{source}: {exc}")
    autodetect = local_autodetect or autodetect
    typed_autodetect = autodetect == "nvml" and any("type" in r for r in gpu)
    uncertain = None
    for rec in gpu:
        if "multiplefiles" in rec:
            uncertain = f"line {rec['#line']}: MultipleFiles= gives one index to several files"
        elif "file" not in rec and not typed_autodetect:
            uncertain = f"line {rec['#line']}: a gpu record without File= has no device to map to"
    types = []
    for rec in gpu:
        kind = rec.get("type")
        if kind not in types:
            types.append(kind)
    if len(types) > 1 and not typed_autodetect:
        # _merge_config orders the records by slurm.conf's types, not gres.conf's lines
        if slurm_gres is None or any(t is None for t, _ in slurm_gres):
            uncertain = uncertain or ("several Type= values and no typed Gres= for this node "
                                      "in slurm.conf to order them")
        else:
            order = [t.lower() for t, _ in slurm_gres if t]
            gpu.sort(key=lambda r: order.index((r.get("type") or "").lower())
                     if (r.get("type") or "").lower() in order else len(order))
    if autodetect and autodetect not in ("off", "none", "nvml"):
        uncertain = f"AutoDetect={autodetect} is not NVIDIA's: its order is not NVML's"
    files: List[str] = []
    typed: List[Tuple[str, int, Tuple[str, ...]]] = []
    try:
        for rec in gpu:
            names = expand_hostlist(rec["file"]) if "file" in rec else []
            files.extend(_within_count(rec, names, files, gpu, slurm_gres, typed_autodetect))
            if typed_autodetect:
                count = rec.get("count", "")
                typed.append((rec.get("type", ""), int(count) if count.isdigit()
                              else len(names) or 1, tuple(names)))
    except GresConfError as exc:
        return GresLayout(source, error=f"{source}: {exc}")
    return GresLayout(source, files=tuple(files), autodetect=autodetect, uncertain=uncertain,
                      typed=tuple(typed), shared=tuple(sorted(shared)))


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
        elif set(rec) <= {"autodetect", "#line"}:
            found_global = value
    return found_global, local


def _within_count(rec: Dict[str, str], names: List[str], taken: List[str], gpu: List[Dict[str, str]],
                  slurm_gres: Optional[Sequence[Tuple[Optional[str], int]]],
                  typed_autodetect: bool) -> List[str]:
    """The files of `rec` that slurmd keeps: `_merge_gres2` keeps the first COUNT files of
    each type that slurm.conf's Gres= gives this node and logs "A line in gres.conf for GRES
    gpu:TYPE has N more configured than expected in slurm.conf. Ignoring extra GRES." (seen
    with `slurmd -G`, 22.05).  An untyped `gpu:N` counts every file."""
    if slurm_gres is None or typed_autodetect:
        return names
    kind = (rec.get("type") or "").lower()
    counts = {(t or "").lower(): c for t, c in slurm_gres}
    if "" in counts and len(counts) == 1:
        return names[:max(0, counts[""] - len(taken))]
    if kind not in counts:
        return names
    same = [r for r in gpu if (r.get("type") or "").lower() == kind]
    before = 0
    for other in same:
        if other is rec:
            break
        before += len(expand_hostlist(other["file"])) if "file" in other else 0
    return names[:max(0, counts[kind] - before)]


def slurm_conf_shared(text: str, node: str) -> Tuple[str, ...]:
    """The sharing gres (mps, shard) in Gres= on slurm.conf's NodeName line for `node` (pure)."""
    items = _node_gres(text, node)
    return tuple(sorted({i.split(":")[0] for i in items or () if i.split(":")[0] in SHARING}))


def _node_gres(text: str, node: str) -> Optional[List[str]]:
    """The Gres= items of slurm.conf's NodeName line for `node`; None = no such line."""
    for line in re.sub(r"\\\n", " ", text).splitlines():
        line = line.split("#", 1)[0].strip()
        words = dict(w.partition("=")[::2] for w in line.split() if "=" in w)
        lower = {k.lower(): v for k, v in words.items()}
        if "nodename" not in lower or "gres" not in lower:
            continue
        try:
            if node not in expand_hostlist(lower["nodename"]):
                continue
        except GresConfError:
            continue
        return lower["gres"].split(",")
    return None


def slurm_conf_gres(text: str, node: str) -> Optional[List[Tuple[Optional[str], int]]]:
    """The gpu entries of Gres= on slurm.conf's NodeName line for `node`, in order (pure)."""
    items = _node_gres(text, node)
    if items is None:
        return None
    found: List[Tuple[Optional[str], int]] = []
    for item in items:
        parts = item.split(":")
        if parts[0] != "gpu":
            continue
        count = parts[-1].split("(")[0]
        kind = parts[1] if len(parts) == 3 else None
        if not count.isdigit():
            count, kind = "1", parts[1] if len(parts) == 2 else kind
        found.append((kind, int(count)))
    return found


# --- reading, with a cache ---------------------------------------------------------------

def gres_conf_path(configured: Optional[str], environ: Dict[str, str]) -> str:
    """Where slurmd reads gres.conf: beside slurm.conf (`get_extra_conf_path`), i.e. the
    directory of SLURM_CONF, else /etc/slurm.  The config key `gres_conf` overrides it
    (config-less sites: slurmd's conf-cache)."""
    if configured:
        return configured
    conf = environ.get("SLURM_CONF")
    return os.path.join(os.path.dirname(conf) if conf else "/etc/slurm", "gres.conf")


def _identity(st: os.stat_result) -> List[int]:
    return [st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size]


def slurm_conf_path(gres_conf: str) -> str:
    """slurm.conf beside gres.conf (slurmd reads both from one directory)."""
    return os.path.join(os.path.dirname(gres_conf), "slurm.conf")


def _read_slurm_conf(path: str) -> Tuple[Optional[List[int]], Optional[str]]:
    """(identity, text) of slurm.conf, (None, None) where it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return _identity(os.fstat(handle.fileno())), handle.read(MAX_CONF_BYTES).decode("utf-8", "replace")
    except OSError:
        return None, None


def device_minors(files: Sequence[str]) -> Tuple[Tuple[Optional[int], ...], Optional[str]]:
    """Each File='s device number as slurmd's cgroup code takes it: st_rdev's minor after
    following links, so `/dev/gpu/slot0 -> /dev/nvidia1` is GPU minor 1.  A file that cannot be
    stat'ed (or is no character device) falls back to its name's trailing digits, and the
    returned note says so."""
    from ..decide.gpumap import trailing_number

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
    """This node's layout from gres.conf and slurm.conf's Gres= beside it, from the cache when
    neither file has changed; the File= device numbers are stat'ed at every call."""
    layout = _read_layout(path, node, state_dir)
    if layout.error or not layout.files:
        return layout
    minors, note = device_minors(layout.files)
    return layout._replace(minors=minors, note=note)


def _read_layout(path: str, node: str, state_dir: Optional[str]) -> GresLayout:
    from ..safefile import atomic_write, read_file

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return GresLayout(path, error=f"cannot read {path}: {exc.strerror or exc}")
    conf_identity, conf_text = _read_slurm_conf(slurm_conf_path(path))
    try:
        st = os.fstat(fd)
        # slurm.conf orders several types and caps each type's count: its identity is part of
        # the key, or an edited slurm.conf would keep the old order (issue 22, item 12)
        key = {"identity": _identity(st), "slurm_conf": conf_identity, "node": node, "path": path}
        if state_dir:
            try:
                cached = json.loads((read_file(state_dir, CACHE) or b"null").decode())
                if isinstance(cached, dict) and cached.get("key") == key:
                    layout = cached["layout"]
                    return GresLayout(path, files=tuple(layout["files"]),
                                      autodetect=layout["autodetect"], uncertain=layout["uncertain"],
                                      typed=tuple((t, c, tuple(f)) for t, c, f in layout["typed"]),
                                      shared=tuple(str(n) for n in layout["shared"]))
            except (OSError, ValueError, KeyError, TypeError):
                pass  # a missing or damaged cache is rebuilt below
        text = os.read(fd, MAX_CONF_BYTES).decode("utf-8", "replace")
    except OSError as exc:
        return GresLayout(path, error=f"cannot read {path}: {exc.strerror or exc}")
    finally:
        os.close(fd)
    layout = parse_gres_conf(text, node, path,
                             slurm_conf_gres(conf_text, node) if conf_text is not None else None)
    if conf_text is not None:
        # mps may be counted in slurm.conf alone (Gres=gpu:4,mps:400 with AutoDetect=nvml)
        layout = layout._replace(shared=tuple(sorted(set(layout.shared) | set(
            slurm_conf_shared(conf_text, node)))))
    if state_dir and layout.error is None:
        try:
            atomic_write(state_dir, CACHE, json.dumps(
                {"key": key, "layout": {"files": list(layout.files), "autodetect": layout.autodetect,
                                        "uncertain": layout.uncertain,
                                        "typed": [list(t) for t in layout.typed],
                                        "shared": list(layout.shared)}}).encode(), durable=False)
        except OSError:
            pass  # the cache only saves a parse
    return layout
