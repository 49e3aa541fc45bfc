"""The run as a person or a script reads it: the JSON document (CONTRACTS §3) and the log
events of its findings, with their journald priorities and fields (pure).

    report = build_report(snapshot, findings, verdict, action, mode, job_id, node, started,
                          duration_s, level, only_gpus)
    events += finding_events(findings, crashes, snapshot, mode, base_fields, ...)
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from .. import __version__
from ..model import (CRIT, ERR, INFO, WARNING, Finding, LogEvent, Mode, NodeAction, NodeSnapshot,
                     Severity, Verdict)
from ..text import iso_utc


def priority(severity: Severity) -> int:
    return {Severity.FAIL: ERR, Severity.UNKNOWN: WARNING, Severity.WARN: WARNING,
            Severity.INFO: INFO}[severity]


def summary_priority(verdict: Verdict) -> int:
    return {Verdict.FAIL: ERR, Verdict.UNKNOWN: WARNING, Verdict.WARN: WARNING,
            Verdict.PASS: INFO}[verdict]


def finding_fields(finding: Finding, snapshot: NodeSnapshot) -> Dict[str, str]:
    fields = {"GPU_HEALTHCHECK_CHECK": finding.check,
              "GPU_HEALTHCHECK_SEVERITY": finding.severity.value,
              "GPU_HEALTHCHECK_ACTION": finding.action.value}
    if finding.value is not None:
        fields["GPU_HEALTHCHECK_VALUE"] = str(finding.value)
    if finding.port is not None:  # an RDMA port finding (checks/network.py)
        fields["GPU_HEALTHCHECK_PORT"] = finding.port
        if finding.pci:
            fields["GPU_HEALTHCHECK_PORT_PCI_BUS_ID"] = finding.pci
    elif finding.pci:  # a GPU NVML no longer lists, named by what an earlier run knew
        fields["GPU_PCI_BUS_ID"] = finding.pci
        if finding.serial:
            fields["GPU_SERIAL"] = finding.serial
    gpu = snapshot.gpu(finding.gpu) if finding.gpu is not None else None
    if finding.gpu is not None:
        fields["GPU_INDEX"] = str(finding.gpu)
    if gpu is not None:
        for key, value in (("GPU_UUID", gpu.uuid), ("GPU_SERIAL", gpu.serial),
                           ("GPU_PCI_BUS_ID", gpu.pci_bus_id)):
            if value:
                fields[key] = value
    return fields


def build_report(snapshot: NodeSnapshot, findings: List[Finding], verdict: Verdict,
                 action: NodeAction, mode: Mode, job_id: Optional[str], node: str,
                 started: float, duration_s: float, level: str,
                 only_gpus: Optional[Tuple[int, ...]] = None) -> Dict[str, Any]:
    """The JSON document of CONTRACTS §3 (fields may be added, never renamed).  `only_gpus`:
    --node --gpus, which lists only those."""
    gpus = snapshot.gpus
    if mode is Mode.NODE and only_gpus is not None:
        gpus = tuple(g for g in gpus if g.index in only_gpus)
    return {
        "schema": 1,
        "tool_version": __version__,
        "host": snapshot.host,
        "node": node,
        "mode": mode.value,
        "job_id": job_id,
        "job_sluid": snapshot.job.sluid if snapshot.job else None,
        "started_at": iso_utc(started),
        "duration_s": round(duration_s, 3),
        "verdict": verdict.value,
        "level": level,
        "driver_version": snapshot.driver_version,
        "driver_age_s": snapshot.driver_age_s,
        "nvml_error": snapshot.nvml_error,
        "gpus": [{"index": g.index, "uuid": g.uuid, "serial": g.serial,
                  "pci_bus_id": g.pci_bus_id, "name": g.name, "minor_number": g.minor_number,
                  "lost": g.lost, "under_test": g.index in snapshot.selected,
                  "ecc_volatile_uncorrected": g.ecc_volatile_uncorrected,
                  "ecc_volatile_corrected": g.ecc_volatile_corrected,
                  "ecc_aggregate_uncorrected": g.ecc_aggregate_uncorrected,
                  "ecc_aggregate_corrected": g.ecc_aggregate_corrected,
                  "remap_correctable": g.remap_correctable,
                  "remap_uncorrectable": g.remap_uncorrectable,
                  "remap_pending": g.remap_pending, "remap_failure": g.remap_failure,
                  "retired_sbe": g.retired_sbe, "retired_dbe": g.retired_dbe,
                  "retired_pending": g.retired_pending,
                  "memory_total_mib": g.memory_total_mib, "memory_used_mib": g.memory_used_mib,
                  "temperature_c": g.temperature_c,
                  # what the GPU is doing, whoever runs there (another container's processes
                  # are not in a process list, but their load shows here)
                  "utilization_gpu_pct": g.utilization_gpu_pct,
                  "utilization_memory_pct": g.utilization_memory_pct, "pstate": g.pstate,
                  "power_mw": g.power_mw, "mig_mode": g.mig_mode,
                  # NVML_COMPUTEMODE_*: 0 default, 2 prohibited, 3 exclusive process
                  "compute_mode": g.compute_mode,
                  "mig_devices": None if g.mig_devices is None else [
                      {"index": m.index, "uuid": m.uuid, "memory_total_mib": m.memory_total_mib}
                      for m in g.mig_devices],
                  "fabric": None if g.fabric_state is None else {
                      "state": g.fabric_state, "status": g.fabric_status,
                      "clique_id": g.fabric_clique_id, "cluster_uuid": g.fabric_cluster_uuid,
                      "health_mask": g.fabric_health_mask,
                      "health_summary": g.fabric_health_summary},
                  "nvlink": None if not g.nvlink_links else {
                      "links": g.nvlink_links, "down": list(g.nvlink_down or ()),
                      "crc_errors": g.nvlink_crc_errors, "replay_errors": g.nvlink_replay_errors,
                      "recovery_errors": g.nvlink_recovery_errors},
                  "pcie_replay": g.pcie_replay,
                  "memory_temperature_c": g.memory_temperature_c,
                  "remap_histogram": None if g.remap_histogram is None else dict(
                      zip(("max", "high", "partial", "low", "none"), g.remap_histogram)),
                  "recovery_action": g.recovery_action}
                 for g in gpus],
        "probes": [{"gpu": p.index, "status": p.status.value, "cu_result": p.cu_result,
                    "cu_name": p.cu_name, "bytes_tested": p.bytes_tested,
                    "duration_s": round(p.duration_s, 3), "detail": p.detail,
                    "device": p.device}
                   for p in snapshot.probes],
        "deep": None if snapshot.deep is None else {
            "gpus": [{"gpu": d.index, "status": d.status, "detail": d.detail or None,
                      "memory_bytes": d.mem_bytes, "memory_errors": d.mem_errors,
                      "memory_pass": d.mem_pass,
                      "memory_first_errors": [{"offset": m.offset, "address": m.address,
                                               "expected": m.expected, "actual": m.actual}
                                              for m in d.mem_records],
                      "hbm_read_gbps": _r(d.hbm_read_gbps), "hbm_copy_gbps": _r(d.hbm_copy_gbps),
                      "h2d_gbps": _r(d.h2d_gbps), "d2h_gbps": _r(d.d2h_gbps), "gflops": _r(d.gflops),
                      "sm_clock_mhz": d.sm_clock_mhz, "sm_clock_max_mhz": d.sm_clock_max_mhz,
                      "clocks_event_reasons": d.load_reasons, "host_numa_node": d.host_numa,
                      "memory_passes": d.mem_passes, "tensor_gflops": _r(d.tensor_gflops),
                      "load_s": round(d.load_s, 3), "launches": d.launches,
                      "wrong_elements": d.wrong_elements, "wrong_launches": d.wrong_launches,
                      "wrong_most": d.wrong_most, "wrong_kernels": list(d.wrong_kernels),
                      "sm_clock_sustained_mhz": d.sm_clock_sustained_mhz,
                      "power_max_mw": d.power_max_mw, "temperature_max_c": d.temperature_max_c,
                      "reasons_first_s": {f"{bit:#x}": t for bit, t in d.reasons_first_s},
                      # [seconds into the load, SM MHz, power mW, temperature C, reasons]
                      "load_trace": [list(s) for s in d.trace],
                      "times_s": {k: round(v, 6) for k, v in d.times},
                      "duration_s": round(d.duration_s, 3)} for d in snapshot.deep.gpus],
            "peers": [{"src": p.src, "dst": p.dst, "gbps": _r(p.gbps), "detail": p.detail or None,
                       "via": p.via or None, "links": list(p.links)}
                      for p in snapshot.deep.peers],
            "peer_detail": snapshot.deep.peer_detail,
            # NVML and the kernel log read again after the tests (deep.after judges the change)
            "after": {"ran": snapshot.deep.after_ran, "error": snapshot.deep.after_error,
                      "xids": [{"pci": e.pci, "xid": e.xid, "count": e.occurrences}
                               for e in snapshot.deep.during_xids]}},
        "dcgm": None if snapshot.dcgm is None else {
            "diag": [r._asdict() for r in snapshot.dcgm.diag],
            "health": [r._asdict() for r in snapshot.dcgm.health],
            "diag_error": snapshot.dcgm.diag_error, "health_error": snapshot.dcgm.health_error},
        "findings": [{"check": f.check, "severity": f.severity.value, "gpu": f.gpu,
                      "value": f.value, "threshold": f.threshold, "message": f.message,
                      "action": f.action.value,
                      **({"port": f.port, "port_pci_bus_id": f.pci} if f.port is not None else {}),
                      **({"pci_bus_id": f.pci, "serial": f.serial} if f.port is None and f.pci else {})}
                     for f in findings],
        "network": network_document(snapshot),
        "kernel_log": kernel_log_document(snapshot),
        "action": {"taken": action.taken, "reason": action.reason, "dry_run": action.dry_run,
                   "detail": action.detail or None, **action.flags},
    }


def network_document(snapshot: NodeSnapshot) -> Optional[Dict[str, Any]]:
    """The RDMA ports as read; None on a node without /sys/class/infiniband."""
    net = snapshot.network
    if net is None:
        return None
    from ..netmodel import ERROR_COUNTERS

    return {"error": net.error, "peermem": net.peermem, "ports": [
        {"name": p.name, "hca": p.hca, "port": p.port, "pci_bus_id": p.pci, "hca_type": p.hca_type,
         "link_layer": p.link_layer, "state": p.state_name, "phys_state": p.phys_state_name,
         "rate": p.rate, "rate_gbps": p.rate_gbps, "netdev": p.netdev, "operstate": p.operstate,
         "counters": {name: getattr(p, name) for name in ERROR_COUNTERS},
         "gpus": list(p.gpus), "unreadable": list(p.unreadable)} for p in net.ports]}


def kernel_log_document(snapshot: NodeSnapshot) -> Dict[str, Any]:
    """What bounded the Xid window (`window`: seq, offset, monotonic, wallclock, boot) and where
    the log stood (`position`: the read's end, or the prolog's recorded position), with how that
    was taken (read/kmsg.py: marker, seek, scan, read, offset, monotonic)."""
    log, end = snapshot.kernel_log, snapshot.kernel_log.end
    return {"window": log.window, "error": log.error, "position": None if end is None else {
        "method": end.method, "seq": end.seq, "offset": end.offset},
        "lost_seqs": list(log.lost_seqs) if log.lost_seqs else None}


def _r(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, 1)


def finding_events(findings: Sequence[Finding], crashes: Sequence[Any], snapshot: NodeSnapshot,
                   mode: Mode, node: str, verdict: Verdict, action: NodeAction,
                   base_fields: Dict[str, str]) -> List[LogEvent]:
    """The run's own log events: each finding (info ones only by hand), each crashed check, and
    the one-line summary."""
    events = [LogEvent("finding", priority(f.severity), f.message,
                       {**base_fields, **finding_fields(f, snapshot)})
              for f in findings if f.severity is not Severity.INFO or mode is Mode.NODE]
    events += [LogEvent("error", CRIT, f"check {crash.check} crashed:\n{crash.traceback}", base_fields)
               for crash in crashes]
    acted = action.taken != "none"
    events.append(LogEvent("summary", summary_priority(verdict),
                           f"{mode.value} on {node}: {verdict.value}, {len(findings)} finding(s)"
                           + (f", action {action.taken}" if acted else "")
                           + (f": {action.reason}" if acted else ""),
                           {**base_fields, "GPU_HEALTHCHECK_VERDICT": verdict.value}))
    return events
