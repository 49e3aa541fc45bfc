"""Which GPUs a job was given: Slurm's ids -> NVML indices, the way slurmd numbers them (pure).

    selected, error = map_job_gpus(("3",), snapshot.gpus, layout)     # layout: read.gres

SLURM_JOB_GPUS (and CUDA_VISIBLE_DEVICES in a prolog) hold gres *indices* or UUIDs.  A gres
index is a position in slurmd's device list, which read/gres.py rebuilds from gres.conf and
slurm.conf (see its docstring for slurmd's code); this module maps those positions to the GPUs
NVML lists.  An id that cannot be mapped for certain is reported, never probed, never drained.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from ..model import NVIDIA_AUTODETECT, GpuSnapshot, GresLayout, autodetect_kind, file_minors, trailing_number


def map_job_gpus(ids: Sequence[str], gpus: Sequence[GpuSnapshot],
                 layout: Optional["GresLayout"] = None) -> Tuple[Tuple[int, ...], Optional[str]]:
    """Slurm's ids -> NVML indices: gres indices through slurmd's device list (gres.py), UUIDs
    directly (GPU- or MIG-).

    Never by NVML order, and never by taking a gres index for a minor number: the two agree only
    while gres.conf lists every device in order.  Returns the indices and an error naming the
    ids that match no GPU for certain (those are not probed and never drain).
    """
    by_uuid = {g.uuid.lower(): g.index for g in gpus if g.uuid}
    # A job on a MIG device is named by its MIG- UUID: it runs on that device's GPU.
    by_uuid.update({m.uuid.lower(): g.index for g in gpus for m in g.mig_devices or () if m.uuid})
    found: List[int] = []
    missing: List[str] = []
    errors: List[str] = []
    numeric = [i for i in ids if i.isdigit()]
    if numeric:
        if layout is None:
            errors.append(f"gres index {','.join(numeric)} cannot be mapped: no gres.conf was read")
            missing.extend(numeric)
        else:
            mapped, error = map_gres_indices(numeric, layout, gpus)
            found.extend(mapped)
            if error:
                errors.append(error)
                missing.extend(numeric[:len(numeric) - len(mapped)])
    for ident in ids:
        if ident.isdigit():
            continue
        index = by_uuid.get(ident.lower())
        if index is None:  # CUDA accepts unique uuid prefixes
            hits = [i for u, i in by_uuid.items() if u.startswith(ident.lower())]
            index = hits[0] if len(hits) == 1 else None
        if index is None:
            missing.append(ident)
            errors.append(f"no GPU with UUID {ident}")
        else:
            found.append(index)
    # A lost or hung GPU may not tell its minor number; ids it could account for are not a
    # malformed list (that GPU fails the node anyway).
    unidentified = sum(1 for g in gpus if g.minor_number is None and g.lost is not None)
    if missing and (len(missing) > unidentified or (layout is not None and (layout.error or layout.uncertain))):
        return tuple(found), "; ".join(errors)
    return tuple(found), None


# the gpu plugins each AutoDetect value of NVIDIA's lets slurmd use
_PLUGINS = {"nvml": ("nvml",), "nvidia": ("nvidia",), "full": ("nvml", "nvidia")}


def device_order(layout: GresLayout, gpus: Sequence[GpuSnapshot]) -> Tuple[List[Optional[int]], Optional[str]]:
    """For each gres index, the NVML index of its GPU (None where unknown), and why any are
    unknown.

    With NVIDIA's AutoDetect, slurmd numbers by the GPUs its gpu plugin finds, if it has one
    that finds them: AutoDetect=nvml by NVML's order (a slurmd built without NVML -- Debian
    12's 22.05: "cannot find gpu plugin for gpu/nvml" -- keeps gres.conf's File= order),
    AutoDetect=nvidia (24.11 and later; unknown to 22.05, which ignores it) by device file
    name, AutoDetect=full (26.05) by NVML's where slurmd has NVML, else gpu/nvidia's.  We
    cannot know which slurmd we serve, so an index is mapped only where every order it may
    use agrees."""
    by_minor = {g.minor_number: g.index for g in gpus if g.minor_number is not None}
    numbers = file_minors(layout)
    by_file: List[Optional[int]] = [by_minor.get(n) if n is not None else None for n in numbers]
    kind = autodetect_kind(layout.autodetect)
    if kind not in NVIDIA_AUTODETECT:
        return by_file, None
    plugins = _PLUGINS[str(kind)]
    if layout.typed and not layout.files:  # Count= records: only the detected names number them
        return _agree([typed_order(layout, gpus, p) for p in plugins], layout.autodetect, None)
    if any(g.minor_number is None for g in gpus):
        return [None] * max(len(layout.files), len(gpus)), \
            f"AutoDetect={layout.autodetect} and a GPU did not tell its minor number: slurmd's order is unknown"
    found = [typed_order(layout, gpus, p) if layout.typed else (nvml_order(layout, gpus, p), None)
             for p in plugins]
    if not layout.files:
        return _agree(found, layout.autodetect, None)  # no File=: only a gpu plugin numbers them
    return _agree(found + [(by_file, None)], layout.autodetect, by_file)


def _agree(orders: Sequence[Tuple[List[Optional[int]], Optional[str]]], autodetect: Optional[str],
           by_file: Optional[List[Optional[int]]]) -> Tuple[List[Optional[int]], Optional[str]]:
    """The indices every candidate order agrees on (None elsewhere), and why any differ."""
    for order, why in orders:
        if why:
            return order, why
    lists = [order for order, _ in orders]
    length = max(len(o) for o in lists)
    padded = [o + [None] * (length - len(o)) for o in lists]
    agreed = [column[0] if all(c == column[0] for c in column) else None for column in zip(*padded)]
    if agreed == padded[0]:
        return agreed, None
    if by_file is not None and autodetect_kind(autodetect) == "nvml":
        return agreed, (f"AutoDetect={autodetect} with File= out of NVML's order: slurmd built with "
                        f"NVML numbers GPUs in NVML order, one without it (Debian 12) in File= order")
    return agreed, (f"AutoDetect={autodetect}: the orders slurmd may use (gpu/nvml: NVML's, gpu/nvidia: "
                    f"device file names{', no plugin: File=' if by_file is not None else ''}) differ here")


def nvml_type(name: str) -> str:
    """The gres type slurmd's gpu/nvml gives a device: its NVML name with blanks made '_' and
    lower-cased (`gpu_common_underscorify_tolower` in src/plugins/gpu/common/gpu_common.c,
    applied by gpu_nvml.c's `_get_system_gpu_list_nvml`), e.g. "NVIDIA A100-SXM4-80GB" ->
    "nvidia_a100-sxm4-80gb"."""
    return "".join("_" if ch in " \t" else ch.lower() for ch in name)


def plugin_order(gpus: Sequence[GpuSnapshot], plugin: str = "nvml") -> List[GpuSnapshot]:
    """The GPUs in the order a gpu plugin leaves them: gpu/nvml's Links mark NVML's
    enumeration order; gpu/nvidia sets no Links, so `_sort_gpu_by_file` leaves them sorted by
    device file name as a string (/dev/nvidia10 before /dev/nvidia2)."""
    if plugin == "nvidia":
        return sorted(gpus, key=lambda g: f"/dev/nvidia{g.minor_number}")
    return sorted(gpus, key=lambda g: g.index)


def typed_order(layout: GresLayout, gpus: Sequence[GpuSnapshot],
                plugin: str = "nvml") -> Tuple[List[Optional[int]], Optional[str]]:
    """AutoDetect=nvml with Type=: the NVML index at each gres index as slurmd numbers them.

    Followed: Slurm 22.05's gres/gpu as a real `slurmd -G` runs it on a system GPU list
    (fake_gpus.conf; tests/readers/test_gres_slurmd.py compares): `_normalize_sys_gres_types` gives
    each detected GPU, in NVML enumeration order, the first gres.conf record with count left
    "with a GRES type that is a substring of system device" (case-insensitive; a record's
    File=, if any, must name the GPU too); a GPU no record takes is ignored ("The following
    autodetected GPUs are being ignored"); the kept GPUs are numbered in NVML (Links) order,
    types mixed.  The device name is nvml_type(NVML's name).  A GPU whose name or minor
    number NVML did not give leaves every index from its position on unknown.

    plugin "nvidia" (gpu/nvidia: the same names, from /proc/driver/nvidia/gpus/*/information)
    numbers the kept GPUs by device file name instead (plugin_order); it detects them in that
    directory's order, which nothing promises is NVML's, so where a GPU is left over (which
    one depends on that order) every index is unknown."""
    left = [count for _, count, _ in layout.typed]
    wanted = [{trailing_number(f) for f in files} for _, _, files in layout.typed]
    taken: List[GpuSnapshot] = []
    ignored = False
    for gpu in sorted(gpus, key=lambda g: g.index):
        if not gpu.name or gpu.minor_number is None:
            before = [g.index for g in plugin_order(taken, plugin)] if plugin == "nvml" else []
            return before + [None] * max(0, sum(left) + len(taken) - len(before)), (
                f"AutoDetect={layout.autodetect} with Type=: GPU {gpu.index} did not tell its "
                f"{'name' if not gpu.name else 'minor number'}, so slurmd's match from it on is unknown")
        device = nvml_type(gpu.name)
        for i, (kind, _, files) in enumerate(layout.typed):
            if left[i] > 0 and kind.lower() in device and (not files or gpu.minor_number in wanted[i]):
                left[i] -= 1
                taken.append(gpu)
                break
        else:
            ignored = True
    if plugin == "nvidia" and ignored:
        return [None] * len(taken), (f"AutoDetect={layout.autodetect} with Type=: gpu/nvidia keeps "
                                     f"{len(taken)} of {len(gpus)} GPUs in an order nothing fixes")
    return [g.index for g in plugin_order(taken, plugin)], None


def nvml_order(layout: GresLayout, gpus: Sequence[GpuSnapshot], plugin: str = "nvml") -> List[Optional[int]]:
    """The NVML index at each gres index as a slurmd built with NVML numbers them
    (`_merge_system_gres_conf`): the detected GPUs that match a configured file (all of them
    when no File= is given) sorted by their Links position, which gpu_nvml.c sets from NVML's
    enumeration; configured files that were not detected follow (None here).
    tests/readers/test_gres.py checks this against a real slurmd (`slurmd -G` with fake_gpus.conf)."""
    wanted = set(file_minors(layout))
    detected = plugin_order([g for g in gpus if g.minor_number is not None
                             and (not layout.files or g.minor_number in wanted)], plugin)
    order: List[Optional[int]] = [g.index for g in detected]
    return order + [None] * (len(layout.files) - len(order))


def map_gres_indices(ids: Sequence[str], layout: GresLayout,
                     gpus: Sequence[GpuSnapshot]) -> Tuple[Tuple[int, ...], Optional[str]]:
    """Slurm gres indices -> NVML indices.  Returns the indices found and an error naming every
    index that cannot be mapped for certain (those are never probed and never drain)."""
    if layout.error:
        return (), f"gres index {','.join(ids)} cannot be mapped to a GPU: {layout.error}"
    if layout.uncertain:
        return (), (f"gres index {','.join(ids)} cannot be mapped to a GPU for certain: "
                    f"{layout.source}: {layout.uncertain}")
    order, why = device_order(layout, gpus)
    found, missing = [], []
    for ident in ids:
        position = int(ident)
        index = order[position] if position < len(order) else None
        if index is None:
            missing.append(ident)
        else:
            found.append(index)
    if missing:
        files = {str(i): layout.files[i] for i in map(int, missing) if i < len(layout.files)}
        detail = ", ".join(f"{i} ({files[i]})" if i in files else f"{i} (not in {layout.source})"
                           for i in missing)
        return tuple(found), f"no GPU for gres index {detail}" + (f": {why}" if why else "")
    return tuple(found), None
