"""The node's RDMA network: InfiniBand and RoCE ports, their error counters, GPUDirect RDMA.

A port that flaps or trains slow kills a training job as surely as a bad GPU (NCCL times out),
and Slurm would start the next job on the same node.  The ports come from
/sys/class/infiniband (read/infiniband.py); a node without it gets no finding here at all.
Every finding names the host, the port (`mlx5_0:1`), the HCA's PCI address and the GPUs on
its PCIe switch, and carries the port in Finding.port, which the drain reason puts in its
value token (`ib.errors=3@mlx5_0:1`, decide/verdict.py).
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from ..model import Action, Finding, Mode, NodeSnapshot, Severity
from ..netmodel import COUNTER_MAX, PHYS_DOWN, STATE_ACTIVE, IbPort
from .registry import CheckContext, gpu_at, node_check

ETHERNET = "Ethernet"
# ib.errors looks at the counters in this order: a link that went down says the most.
COUNTER_ORDER = ("link_downed", "link_error_recovery", "symbol_error", "port_rcv_errors",
                 "local_link_integrity_errors", "excessive_buffer_overrun_errors")
# rdma-core's ibqueryerrors thresholds (infiniband-diags/etc/error_thresholds) for the node
# view of absolute counters (info: history since the counters were last cleared).
IBQUERYERRORS_THRESHOLDS = {"symbol_error": 10, "link_error_recovery": 10, "link_downed": 10,
                            "port_rcv_errors": 10, "local_link_integrity_errors": 10,
                            "excessive_buffer_overrun_errors": 10}


def where(port: IbPort, node: NodeSnapshot) -> str:
    """How a message names a port: "node01 mlx5_0:1 (0000:3b:00.0, serves GPU 0, 1)"."""
    parts = [port.pci or "PCI unknown"]
    indices = []
    for pci in port.gpus:
        gpu = gpu_at(node, pci)
        if gpu is not None:
            indices.append(str(gpu.index))
    if indices:
        parts.append(f"serves GPU {', '.join(indices)}")
    return f"{node.host} {port.name} ({', '.join(parts)})"


def _f(check: str, severity: Severity, port: Optional[IbPort], message: str, value: object = None,
       threshold: object = None, action: Action = Action.NONE) -> Finding:
    return Finding(check=check, severity=severity, message=message, value=value,  # type: ignore[arg-type]
                   threshold=threshold, action=action,  # type: ignore[arg-type]
                   port=port.name if port else None, pci=port.pci if port else None)


def is_up(port: IbPort) -> Optional[bool]:
    """ACTIVE with a physical link, and for RoCE a netdev that is up (where sysfs names it)."""
    up = port.up
    if up and port.link_layer == ETHERNET and port.operstate not in (None, "up"):
        return False
    return up


def _state_text(port: IbPort) -> str:
    text = f"{port.state_name or port.state}/{port.phys_state_name or port.phys_state}"
    if port.link_layer == ETHERNET and port.operstate is not None:
        text += f"/{port.netdev or 'netdev'}:{port.operstate}"
    return text


def _expected(ctx: CheckContext) -> Tuple[Optional[Tuple[str, ...]], Optional[int]]:
    expected = ctx.config.network.expected_ports
    if expected is None:
        return None, None
    if isinstance(expected, int):
        return None, expected
    return tuple(expected), None


def _layer(node: NodeSnapshot, ethernet: bool) -> List[IbPort]:
    if node.network is None:
        return []
    return [p for p in node.network.ports if (p.link_layer == ETHERNET) == ethernet]


def _state_findings(check: str, ports: Sequence[IbPort], node: NodeSnapshot,
                    ctx: CheckContext) -> Iterator[Finding]:
    names, _ = _expected(ctx)
    for port in ports:
        up = is_up(port)
        if up is None:
            if port.unreadable:
                yield _f(check, Severity.UNKNOWN, port, f"{where(port, node)}: cannot read the port "
                         f"state ({port.unreadable[0]})", value="unreadable")
            continue
        if up:
            continue
        state = _state_text(port)
        base = node.baseline_of_port(port)
        was_up = (base is not None and base.state == 4 and base.phys_state not in PHYS_DOWN)
        job = f" job {node.job.job_id}" if node.job and node.job.job_id else ""
        if names is not None and port.name in names:
            yield _f(check, Severity.FAIL, port, f"{where(port, node)}: port is {state}, "
                     f"network.expected_ports wants it ACTIVE/LinkUp; check the cable and the "
                     f"switch port (ibstat {port.hca} {port.port})", value=state,
                     threshold="ACTIVE/LinkUp", action=Action.DRAIN)
        elif ctx.mode is Mode.EPILOG and was_up:
            yield _f(check, Severity.FAIL, port, f"{where(port, node)}: port was ACTIVE/LinkUp at "
                     f"the prolog of{job} and is {state} now: the link went down during the job",
                     value=state, threshold="ACTIVE/LinkUp", action=Action.DRAIN)
        elif names is None:
            # without expected_ports an unused port is no fault; a disabled one is the admin's
            severity = Severity.INFO if port.phys_state in (3,) else Severity.WARN
            yield _f(check, severity, port, f"{where(port, node)}: port is {state}; set "
                     f"network.expected_ports to make a down port fail", value=state,
                     threshold="ACTIVE/LinkUp")


def _gone_since_prolog(node: NodeSnapshot) -> Iterator[Finding]:
    """Ports ACTIVE at the job's prolog that the epilog no longer finds at all (the HCA fell
    off the bus, or its driver went): what the job started with is expected at its end, with
    or without network.expected_ports."""
    if node.baseline is None or (node.network is not None and node.network.error):
        return
    present = {p.name for p in node.network.ports} if node.network is not None else set()
    job = f" job {node.job.job_id}" if node.job and node.job.job_id else ""
    for base in node.baseline.ports:
        if base.name in present or base.state != STATE_ACTIVE or base.phys_state in PHYS_DOWN:
            continue
        yield Finding(check="ib.port_state", severity=Severity.FAIL, port=base.name,
                      message=f"{node.host} {base.name}: port was ACTIVE/LinkUp at the prolog "
                              f"of{job} and is gone now (/sys/class/infiniband has no such port): "
                              f"the HCA or its driver went during the job; check the HCA "
                              f"(lspci, dmesg)", value="absent", threshold="ACTIVE/LinkUp",
                      action=Action.DRAIN)


def _best_rates(ports: Sequence[IbPort]) -> Dict[Tuple[str, str], Tuple[float, str]]:
    """The fastest up port of each HCA model and link layer on this node: sysfs gives no
    port's supported maximum, so its siblings' rate stands for what it can train to."""
    best: Dict[Tuple[str, str], Tuple[float, str]] = {}
    for port in ports:
        if is_up(port) and port.rate_gbps is not None:
            key = (port.hca_type or port.hca.rstrip("0123456789"), port.link_layer or "")
            if key not in best or port.rate_gbps > best[key][0]:
                best[key] = (port.rate_gbps, port.rate or f"{port.rate_gbps:g} Gb/sec")
    return best


def _rate_findings(check: str, ports: Sequence[IbPort], node: NodeSnapshot,
                   ctx: CheckContext) -> Iterator[Finding]:
    floor = ctx.config.network.min_rate_gbps
    best = _best_rates(ports)
    for port in ports:
        if not is_up(port) or port.rate_gbps is None:
            continue
        rate = port.rate or f"{port.rate_gbps:g} Gb/sec"
        base = node.baseline_of_port(port)
        key = (port.hca_type or port.hca.rstrip("0123456789"), port.link_layer or "")
        if floor and port.rate_gbps < floor:
            yield _f(check, Severity.WARN, port, f"{where(port, node)}: runs at {rate}, below "
                     f"network.min_rate_gbps = {floor:g} Gb/sec; reseat or replace the cable",
                     value=port.rate_gbps, threshold=floor)
        elif ctx.mode is Mode.EPILOG and base and base.rate_gbps and port.rate_gbps < base.rate_gbps:
            yield _f(check, Severity.WARN, port, f"{where(port, node)}: runs at {rate}, it ran at "
                     f"{base.rate_gbps:g} Gb/sec at the prolog: it retrained slower during the job",
                     value=port.rate_gbps, threshold=base.rate_gbps)
        elif key in best and port.rate_gbps < best[key][0]:
            yield _f(check, Severity.WARN, port, f"{where(port, node)}: runs at {rate}, other "
                     f"{key[0]} ports on this node run at {best[key][1]}: it trained below "
                     f"its best; reseat or replace the cable", value=port.rate_gbps,
                     threshold=best[key][0])


@node_check("ib.port_state", severity=Severity.FAIL, action=Action.DRAIN,
            threshold_key="network.expected_ports")
def check_ib_port_state(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """An InfiniBand port that is down or polling where it should be up (ACTIVE / LinkUp).

    Which ports must be up comes from `network.expected_ports` (names, or a count of ports up
    over the node); without it, a port up at the prolog and down at the epilog fails, and any
    other down port only warns (an unused port is no fault).  A job placed here would find no
    route to its peers: NCCL fails at its first collective.
    ibstat equivalent: `ibstat mlx5_0 1` ("State: Active", "Physical state: LinkUp").
    """
    if ctx.mode is Mode.EPILOG:
        yield from _gone_since_prolog(node)
    net = node.network
    if net is None:
        return
    if net.error:
        yield _f("ib.port_state", Severity.UNKNOWN, None, f"{node.host}: {net.error}",
                 value="unreadable")
    names, count = _expected(ctx)
    present = {p.name for p in net.ports}
    for name in names or ():
        if name not in present:
            yield Finding(check="ib.port_state", severity=Severity.FAIL, port=name,
                          message=f"{node.host} {name}: network.expected_ports names this port "
                                  f"but /sys/class/infiniband has no such port; check the HCA "
                                  f"and its driver", value="absent", threshold="ACTIVE/LinkUp",
                          action=Action.DRAIN)
    if count is not None:
        up = [p for p in net.ports if is_up(p)]
        if len(up) < count:
            down = [p for p in net.ports if is_up(p) is False]
            yield _f("ib.port_state", Severity.FAIL, down[0] if down else None,
                     f"{node.host}: {len(up)} RDMA port(s) up, network.expected_ports = {count}"
                     + (f"; down: {', '.join(p.name + ' ' + _state_text(p) for p in down)}"
                        if down else ""), value=len(up), threshold=count, action=Action.DRAIN)
    yield from _state_findings("ib.port_state", _layer(node, ethernet=False), node, ctx)


@node_check("ib.rate", severity=Severity.WARN, threshold_key="network.min_rate_gbps")
def check_ib_rate(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """An InfiniBand port that trained below its best rate: warn, naming the port and both rates.

    The best is `network.min_rate_gbps` where set, the port's own rate at the prolog (in the
    epilog), else the fastest up port of the same HCA model on this node: sysfs does not say
    what a port supports, and a cable that trains 4X EDR on an NDR fabric shows as the one slow
    port among its siblings.  A slow link still works, so this never drains.
    ibstat equivalent: `ibstat mlx5_0 1` ("Rate: 400").
    """
    yield from _rate_findings("ib.rate", _layer(node, ethernet=False), node, ctx)


@node_check("ib.link_layer", severity=Severity.FAIL, action=Action.DRAIN,
            threshold_key="network.expected_ports")
def check_ib_link_layer(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """A RoCE port (link_layer Ethernet) that is down, or whose netdev is not up, or is slow.

    The same state and rate rules as ib.port_state and ib.rate, for the RDMA ports that run
    over Ethernet, with the netdev's operstate as a further condition of "up".
    ibstat equivalent: `ibv_devinfo -d mlx5_0` ("link_layer: Ethernet", "state: PORT_ACTIVE")
    and `ip link show <netdev>`.
    """
    ports = _layer(node, ethernet=True)
    yield from _state_findings("ib.link_layer", ports, node, ctx)
    yield from _rate_findings("ib.link_layer", ports, node, ctx)


@node_check("ib.errors", severity=Severity.FAIL, action=Action.DRAIN,
            threshold_key="network.link_downed_per_job")
def check_ib_errors(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """Port error counters that grew during the job above their limits (epilog vs the prolog).

    symbol_error, link_error_recovery, link_downed, port_rcv_errors,
    local_link_integrity_errors and excessive_buffer_overrun_errors, each with its
    `network.<counter>_per_job` limit: rdma-core's ibqueryerrors thresholds (10 each) except
    link_downed, where one (the link flapped during the job) fails.  A counter at the top of
    its width cannot show growth (they saturate): unknown, clear it with `perfquery -R`.
    `--node` reports counters past ibqueryerrors' thresholds as info (history).
    ibstat equivalent: `perfquery -x` / `ibqueryerrors`.
    """
    net = node.network
    if net is None:
        return
    limits = ctx.config.network
    for port in net.ports:
        base = node.baseline_of_port(port)
        for name in COUNTER_ORDER:
            now = getattr(port, name)
            if now is None:
                if ctx.mode is Mode.EPILOG and any(f"/{name}:" in u for u in port.unreadable):
                    yield _f("ib.errors", Severity.UNKNOWN, port, f"{where(port, node)}: cannot "
                             f"read {name}: {next(u for u in port.unreadable if f'/{name}:' in u)}",
                             value="unreadable")
                continue
            if ctx.mode is Mode.NODE and now > IBQUERYERRORS_THRESHOLDS[name]:
                yield _f("ib.errors", Severity.INFO, port, f"{where(port, node)}: {name} = {now} "
                         f"since the counters were last cleared", value=now,
                         threshold=IBQUERYERRORS_THRESHOLDS[name])
            before = getattr(base, name) if base is not None else None
            if ctx.mode is not Mode.EPILOG or before is None:
                continue
            limit = getattr(limits, f"{name}_per_job")
            # a counter never goes down by itself: one that did was cleared during the job
            # (perfquery -R, a driver reload, a port reset), and what it holds now is its
            # growth since then
            reset = now < before
            grown = now if reset else now - before
            if before >= COUNTER_MAX[name] and now >= COUNTER_MAX[name]:
                yield _f("ib.errors", Severity.UNKNOWN, port, f"{where(port, node)}: {name} is "
                         f"saturated at {now}: growth during the job cannot be seen; clear the "
                         f"counters (perfquery -R)", value="saturated", threshold=limit)
            elif grown > limit:
                flapped = " (the link went down during the job)" if name == "link_downed" else ""
                cleared = (f"; it was cleared during the job ({before} -> {now}), so {now} "
                           f"counts since then" if reset else f" ({before} -> {now})")
                yield _f("ib.errors", Severity.FAIL, port, f"{where(port, node)}: {name} grew by "
                         f"{grown} during the job{cleared}, limit "
                         f"network.{name}_per_job = {limit}{flapped}; check the cable and the "
                         f"switch port", value=grown, threshold=limit, action=Action.DRAIN)


@node_check("gpudirect.rdma", severity=Severity.WARN, threshold_key="network.gpudirect")
def check_gpudirect_rdma(node: NodeSnapshot, ctx: CheckContext) -> Iterator[Finding]:
    """GPUDirect RDMA is expected but neither nvidia_peermem nor nv_peer_mem is loaded.

    Without it NCCL stages every transfer through host memory: the job runs, much slower.
    `network.gpudirect = auto` expects it where a port shares a PCIe switch with a GPU, `true`
    on every node with GPUs and RDMA ports, `false` never.  Warn only.
    nvidia-smi equivalent: `lsmod | grep -e nvidia_peermem -e nv_peer_mem`; `nvidia-smi topo -m`.
    """
    wanted = ctx.config.network.gpudirect
    net = node.network
    if wanted == "false" or net is None or not net.ports or not node.gpus or net.peermem:
        return
    near = [p for p in net.ports if p.gpus]
    if wanted == "auto" and not near:
        return
    ports = near or list(net.ports)
    yield _f("gpudirect.rdma", Severity.WARN, ports[0], f"{node.host}: GPUDirect RDMA is expected "
             f"(network.gpudirect = {wanted}; ports {', '.join(p.name for p in ports[:8])}) but "
             f"neither nvidia_peermem nor nv_peer_mem is loaded; modprobe nvidia-peermem",
             value="not_loaded", threshold="nvidia_peermem")
