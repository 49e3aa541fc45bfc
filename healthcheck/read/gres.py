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
from typing import Dict, List, Optional, Sequence, Tuple

from ..model import GresLayout

CACHE = "gres-map.json"
MAX_CONF_BYTES = 1 << 20  # a gres.conf is a few lines
MAX_EXPANSION = 4096  # files or hosts one hostlist may name


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
    needed only when gres.conf gives several types.
    """
    try:
        records = _records(text)
        autodetect: Optional[str] = None
        gpu: List[Dict[str, str]] = []
        for rec in records:
            if "include" in rec:
                return GresLayout(source, uncertain=f"line {rec['#line']}: Include= is not followed")
            if "nodename" in rec and node not in expand_hostlist(rec["nodename"]):
                continue
            if "autodetect" in rec:
                autodetect = rec["autodetect"].lower()
            if rec.get("name") == "gpu":
                gpu.append(rec)
    except GresConfError as exc:
        return GresLayout(source, error=f"{source}: {exc}")
    uncertain = None
    for rec in gpu:
        if "multiplefiles" in rec:
            uncertain = f"line {rec['#line']}: MultipleFiles= gives one index to several files"
        elif "file" not in rec:
            uncertain = f"line {rec['#line']}: a gpu record without File= has no device to map to"
    types = []
    for rec in gpu:
        kind = rec.get("type")
        if kind not in types:
            types.append(kind)
    if len(types) > 1:
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
    if autodetect == "nvml" and any("type" in r for r in gpu):
        uncertain = uncertain or "AutoDetect=nvml with Type=: slurmd matches types we cannot see"
    files: List[str] = []
    try:
        for rec in gpu:
            if "file" in rec:
                files.extend(expand_hostlist(rec["file"]))
    except GresConfError as exc:
        return GresLayout(source, error=f"{source}: {exc}")
    return GresLayout(source, files=tuple(files), autodetect=autodetect, uncertain=uncertain)


def slurm_conf_gres(text: str, node: str) -> Optional[List[Tuple[Optional[str], int]]]:
    """The gpu entries of Gres= on slurm.conf's NodeName line for `node`, in order (pure)."""
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
        found: List[Tuple[Optional[str], int]] = []
        for item in lower["gres"].split(","):
            parts = item.split(":")
            if parts[0] != "gpu":
                continue
            count = parts[-1].split("(")[0]
            kind = parts[1] if len(parts) == 3 else None
            if not count.isdigit():
                count, kind = "1", parts[1] if len(parts) == 2 else kind
            found.append((kind, int(count)))
        return found
    return None


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


def read_layout(path: str, node: str, state_dir: Optional[str] = None) -> GresLayout:
    """This node's layout from gres.conf, from the cache when the file has not changed."""
    from ..safefile import atomic_write, read_file

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return GresLayout(path, error=f"cannot read {path}: {exc.strerror or exc}")
    try:
        st = os.fstat(fd)
        key = {"identity": _identity(st), "node": node, "path": path}
        if state_dir:
            try:
                cached = json.loads((read_file(state_dir, CACHE) or b"null").decode())
                if isinstance(cached, dict) and cached.get("key") == key:
                    layout = cached["layout"]
                    return GresLayout(path, files=tuple(layout["files"]),
                                      autodetect=layout["autodetect"], uncertain=layout["uncertain"])
            except (OSError, ValueError, KeyError, TypeError):
                pass  # a missing or damaged cache is rebuilt below
        text = os.read(fd, MAX_CONF_BYTES).decode("utf-8", "replace")
    except OSError as exc:
        return GresLayout(path, error=f"cannot read {path}: {exc.strerror or exc}")
    finally:
        os.close(fd)
    layout = parse_gres_conf(text, node, path)
    if layout.uncertain and "several Type=" in layout.uncertain:
        slurm_conf = os.path.join(os.path.dirname(path), "slurm.conf")
        try:
            with open(slurm_conf, "rb") as handle:
                conf_text = handle.read(MAX_CONF_BYTES).decode("utf-8", "replace")
            layout = parse_gres_conf(text, node, path, slurm_conf_gres(conf_text, node))
        except OSError:
            pass
    if state_dir and layout.error is None:
        try:
            atomic_write(state_dir, CACHE, json.dumps(
                {"key": key, "layout": {"files": list(layout.files), "autodetect": layout.autodetect,
                                        "uncertain": layout.uncertain}}).encode(), durable=False)
        except OSError:
            pass  # the cache only saves a parse
    return layout
