"""The counter rules of --suspects: each GPU serial's error counters over our own history.
Pure: CounterSamples in (from the history lines' "gpus" block), Suspects out.

    samples = counter_samples(records)       # the history lines, as read_history gives them
    counter_suspects(samples, config.suspects, until=time.time())

A GPU's samples are kept by serial, so its record follows it to another node; a suspect names
the node where the serial was seen last.  Only samples within `counter_window_s` before `until`
count.  Growth is summed sample to sample; a counter that went down was reset (the driver
reloaded: PCIe and NVLink replays count from then), and counts from zero again.

- **ecc_sbe_rate**: corrected ECC errors per hour under load (the intervals that end with a
  job on the GPU) at least `sbe_ratio` times the median of the sibling GPUs' (the other
  serials at the same node, over the same window), and at least `sbe_min_errors` of them.
  NVIDIA publishes no limit on corrected errors (Xid 92, "high single-bit ECC error rate",
  is the driver's own unpublished threshold, and its catalog says to watch it); the defaults
  are this project's: an order of magnitude over the GPUs beside it under the same jobs, and
  enough errors that a handful is no rate.
- **remap_headroom**: memory banks with low or no row-remap availability (NVML's remapper
  histogram, its "Low" and "None" buckets) grew by at least `remap_low_growth`.  NVIDIA's
  GPU Memory Error Management: a bank without spare rows turns its next uncorrectable error
  into a remap failure (Xid 64), an RMA criterion; the node check warns on "None" alone.
- **retired_pages**: retired pages grew by at least `retired_pages_growth`.  NVIDIA's Dynamic
  Page Retirement: a page is retired after a double-bit error or repeated single-bit errors
  at one address, and 60 retired pages is the RMA limit (`thresholds.retired_pages`); pages
  retiring now mean the memory is failing now, long before 60.
- **pcie_replay** / **nvlink_replay**: the replay counters grew by at least
  `pcie_replay_growth` / `nvlink_replay_growth` within the window: the per-job limits of the
  node check (`thresholds.pcie_replay_per_job`, DCGM's PCIe replay-rate watch;
  `thresholds.nvlink_errors_per_job`) reached slowly, job after job.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import TYPE_CHECKING, Any, DefaultDict, Dict, Iterable, List, Optional, Sequence, Tuple

from ..fleetmodel import CounterSample, Suspect
from ..text import iso_utc

if TYPE_CHECKING:
    from ..configsections import SuspectsConfig

KINDS = ("ecc_sbe_rate", "remap_headroom", "retired_pages", "pcie_replay", "nvlink_replay")


def _int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def counter_samples(records: Iterable[Dict[str, Any]]) -> List[CounterSample]:
    """CounterSamples from history lines (act/history.py's "gpus" block); a line without one,
    or a value of the wrong type, gives nothing rather than a guess."""
    out: List[CounterSample] = []
    for rec in records:
        if not isinstance(rec, dict) or not isinstance(rec.get("gpus"), dict):
            continue
        epoch, node = rec.get("epoch"), rec.get("node") or rec.get("host")
        if not isinstance(epoch, (int, float)) or isinstance(epoch, bool) or not isinstance(node, str):
            continue
        for serial, c in rec["gpus"].items():
            if not serial or not isinstance(c, dict):
                continue
            out.append(CounterSample(float(epoch), node, str(serial), _int(c.get("gpu")),
                                     c.get("load") is True, _int(c.get("sbe")), _int(c.get("retired")),
                                     _int(c.get("remap_low")), _int(c.get("pcie_replay")),
                                     _int(c.get("nvlink_replay"))))
    return out


def growth(values: Sequence[Optional[int]]) -> int:
    """What a counter grew by over consecutive samples; a drop is a reset (counted from zero),
    and a missing value bridges nothing."""
    total, last = 0, None
    for value in values:
        if value is None:
            continue
        if last is not None:
            total += value - last if value >= last else value
        last = value
    return total


def _under_load(samples: Sequence[CounterSample]) -> Tuple[int, float]:
    """(corrected errors, seconds) over the intervals that end with a job on the GPU."""
    errors, seconds = 0, 0.0
    for before, after in zip(samples, samples[1:]):
        if after.load and before.sbe is not None and after.sbe is not None:
            errors += after.sbe - before.sbe if after.sbe >= before.sbe else after.sbe
            seconds += max(0.0, after.time - before.time)
    return errors, seconds


def counter_suspects(samples: Sequence[CounterSample], cfg: "SuspectsConfig", until: float) -> List[Suspect]:
    """Every counter rule over each serial's samples in the window, worst first."""
    by_serial: DefaultDict[str, List[CounterSample]] = defaultdict(list)
    for s in sorted(samples, key=lambda s: s.time):
        if until - cfg.counter_window_s <= s.time <= until:
            by_serial[s.serial].append(s)
    found: List[Suspect] = []
    rates: Dict[str, Tuple[float, int, float]] = {}  # serial -> (errors per hour, errors, hours)
    for serial, evs in by_serial.items():
        errors, seconds = _under_load(evs)
        if seconds > 0:
            rates[serial] = (errors / (seconds / 3600.0), errors, seconds / 3600.0)
    at: DefaultDict[str, List[str]] = defaultdict(list)  # node -> serials seen there last
    for serial, evs in by_serial.items():
        at[evs[-1].node].append(serial)
    for serial, evs in sorted(by_serial.items()):
        last = evs[-1]
        where = {"gpu": last.gpu, "from": iso_utc(evs[0].time), "to": iso_utc(last.time),
                 "samples": len(evs), "nodes": sorted({e.node for e in evs})}
        for kind, field, limit in (("retired_pages", "retired", cfg.retired_pages_growth),
                                   ("remap_headroom", "remap_low", cfg.remap_low_growth),
                                   ("pcie_replay", "pcie_replay", cfg.pcie_replay_growth),
                                   ("nvlink_replay", "nvlink_replay", cfg.nvlink_replay_growth)):
            values = [getattr(e, field) for e in evs]
            grew = growth(values)
            if grew >= limit:
                seen = [v for v in values if v is not None]
                found.append(Suspect(last.node, kind, float(grew), {
                    field + "_growth": grew, "first": seen[0], "last": seen[-1], "threshold": limit,
                    **where}, serial=serial))
        mine = rates.get(serial)
        siblings = [rates[s][0] for s in at[last.node] if s != serial and s in rates]
        if mine is None or not siblings or mine[1] < cfg.sbe_min_errors:
            continue
        median = statistics.median(siblings)
        if mine[0] >= cfg.sbe_ratio * median:
            found.append(Suspect(last.node, "ecc_sbe_rate", mine[0] / median if median > 0 else float(mine[1]), {
                "sbe_under_load": mine[1], "hours_under_load": round(mine[2], 2),
                "sbe_per_hour": round(mine[0], 3), "siblings_median_per_hour": round(median, 3),
                "siblings": len(siblings), "ratio": cfg.sbe_ratio, "min_errors": cfg.sbe_min_errors,
                **where}, serial=serial))
    return sorted(found, key=lambda s: (KINDS.index(s.kind), -s.score, s.node, s.serial or ""))
