#!/usr/bin/env python3
"""Fake nccl-tests (all_reduce_perf, all_gather_perf) and perftest's ib_write_bw for the fabric
tests: `make -C tests/fakegpu` installs this file as build/all_reduce_perf, build/all_gather_perf
and build/ib_write_bw; what it does depends on the name it runs under.

Started by srun inside a Slurm job, each task takes the step's nodes from Slurm's environment
(SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST, else SLURM_NODELIST; a hostlist such as
`gpu-[01-03],gpu-a`) and its rank from SLURM_PROCID; rank 0 prints, the others print nothing,
as nccl-tests' PRINT and perftest's client do.  The run's figures come from the fabric scenario
named by FAKEGPU_FABRIC (keys in tests/fakegpu/README.md, "Fabric scenario"):

    default.busbw_gbps = 380          # every collective
    node.gpu-c.busbw_gbps = 41.2      # any collective that includes gpu-c: at most this
    pair.gpu-a,gpu-b.busbw_gbps = 50  # a collective of gpu-a and gpu-b (either order)
    pair.gpu-a,gpu-b.fail_once = 1    # its first run has wrong elements; later runs pass
    node.gpu-d.nccl.hang = 1          # never finishes (the job's time limit ends it)
    node.gpu-d.nccl.error = TEXT      # NCCL WARN TEXT, Test NCCL failure, exit 1
    node.gpu-d.wrong = 3              # 3 wrong elements: Out of bounds values : 3 FAILED, exit 1
    node.gpu-e.rail.mlx5_1.gbps = 150 # ib_write_bw on that rail of gpu-e
    default.rail_gbps = 392
    default.nccl.no_mpi = 1           # each task its own single-node job (no MPI, no --mpi=pmix)

The output is nccl-tests' (src/common.cu, the current layout with `root` and `#wrong`) and
perftest's (`--report_gbits` or MB/sec, which is MiB/s).  fail_once keeps its state in the file
FAKEGPU_FABRIC.state beside the scenario, under a lock, so it holds across jobs.  A malformed
scenario line is an error on stderr and exit status 2, never a silent default.  It never
imports the checker's package: it stands for programs NVIDIA and the RDMA community ship.
"""

import fcntl
import os
import re
import signal
import sys

KEYS = re.compile(r"^(?:default\.(?P<default>busbw_gbps|rail_gbps|nccl\.no_mpi)"
                  r"|node\.(?P<rnode>.+?)\.rail\.(?P<hca>[^.\s]+)\.gbps"
                  r"|node\.(?P<node>.+?)\.(?P<nkey>busbw_gbps|nccl\.hang|nccl\.error|wrong)"
                  r"|pair\.(?P<a>[^,\s]+),(?P<b>[^.\s]+(?:\.[^.\s]+)*?)\.(?P<pkey>busbw_gbps|fail_once))$")


def die(message):
    sys.stderr.write(f"fakegpu fabric: {message}\n")
    sys.exit(2)


def expand(hostlist):
    """Slurm's hostlist syntax: "gpu-[01-03,07],login" -> the names, in order."""
    names, depth, start = [], 0, 0
    parts = []
    for i, ch in enumerate(hostlist + ","):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(hostlist[start:i])
            start = i + 1
    for part in filter(None, parts):
        m = re.fullmatch(r"(.*?)\[([^\]]+)\](.*)", part)
        if not m:
            names.append(part)
            continue
        for piece in m.group(2).split(","):
            low, _, high = piece.partition("-")
            if not low.isdigit() or not (high or low).isdigit():
                die(f"cannot read the hostlist {hostlist!r}")
            for n in range(int(low), int(high or low) + 1):
                names.append(f"{m.group(1)}{n:0{len(low)}d}{m.group(3)}")
    return names


def scenario():
    path = os.environ.get("FAKEGPU_FABRIC")
    values = {}
    if not path:
        return path, values
    try:
        text = open(path).read()
    except OSError as exc:
        die(f"{path}: {exc.strerror}")
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        key, eq, value = (s.strip() for s in line.partition("="))
        if not eq or not KEYS.match(key):
            die(f"{path}:{number}: not a fabric key: {line!r}")
        if key.endswith(("gbps", "wrong", "hang", "fail_once", "no_mpi")):
            try:
                float(value)
            except ValueError:
                die(f"{path}:{number}: {key} takes a number, got {value!r}")
        values[key] = value
    return path, values


def pair_keys(values, nodes, suffix):
    """The pair.A,B.SUFFIX keys whose nodes are both in this collective."""
    found = []
    for key, value in values.items():
        m = KEYS.match(key)
        if m and m.group("pkey") == suffix and m.group("a") in nodes and m.group("b") in nodes:
            found.append((tuple(sorted((m.group("a"), m.group("b")))), value))
    return found


def first_run(path, pair):
    """Whether this is the first run of `pair` (recorded in PATH.state, under a lock)."""
    with open(path + ".state", "a+") as state:
        fcntl.flock(state, fcntl.LOCK_EX)
        state.seek(0)
        seen = set(state.read().split())
        name = ",".join(pair)
        if name in seen:
            return False
        state.write(name + "\n")
        return True


def step():
    nodes = expand(os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST")
                   or os.environ.get("SLURM_NODELIST") or os.uname().nodename)
    rank = int(os.environ.get("SLURM_PROCID", "0"))
    ntasks = int(os.environ.get("SLURM_STEP_NUM_TASKS") or os.environ.get("SLURM_NTASKS") or len(nodes))
    return nodes, rank, max(ntasks, 1)


def sizes(argv):
    """-b/-e/-f as nccl-tests reads them (K, M, G suffixes), default 32M to 32M."""
    def size(text):
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)
    opts = {"-b": "33554432", "-e": "33554432", "-f": "2", "-g": "1"}
    long = {"--minbytes": "-b", "--maxbytes": "-e", "--stepfactor": "-f", "--ngpus": "-g"}
    i = 0
    while i < len(argv):
        flag = long.get(argv[i], argv[i])
        if flag in opts and i + 1 < len(argv):
            opts[flag] = argv[i + 1]
            i += 2
            continue
        i += 1
    low, high, factor = size(opts["-b"]), size(opts["-e"]), max(int(opts["-f"]), 2)
    out = []
    while low <= high and len(out) < 64:
        out.append(low)
        low *= factor
    return out or [high], int(opts["-g"])


def alone(nodes, ntasks, ngpus):
    """nccl-tests without MPI: this task is rank 0 of a job of its own -g GPUs on its own host."""
    host = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    return [host], 0, ngpus


def collective(name, argv):
    nodes, rank, ntasks = step()
    path, values = scenario()
    if float(values.get("default.nccl.no_mpi", "0")):
        nodes, rank, ntasks = alone(nodes, ntasks, sizes(argv)[1])
    busbw = float(values.get("default.busbw_gbps", "380"))
    for node in nodes:
        if f"node.{node}.busbw_gbps" in values:
            busbw = min(busbw, float(values[f"node.{node}.busbw_gbps"]))
    for _, value in pair_keys(values, nodes, "busbw_gbps"):
        busbw = min(busbw, float(value))
    hang = [n for n in nodes if float(values.get(f"node.{n}.nccl.hang", "0"))]
    error = next((values[f"node.{n}.nccl.error"] for n in nodes if f"node.{n}.nccl.error" in values), None)
    wrong = sum(int(float(values.get(f"node.{n}.wrong", "0"))) for n in nodes)
    if rank == 0 and path:
        for pair, value in pair_keys(values, nodes, "fail_once"):
            if float(value) and first_run(path, pair):
                wrong += 1
    steps, ngpus = sizes(argv)
    out = sys.stdout
    if rank == 0:
        out.write(f"# nThread 1 nGpus {ngpus} minBytes {steps[0]} maxBytes {steps[-1]} step: 2(factor) "
                  f"warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n# Using devices\n")
        per_node = max(ntasks // max(len(nodes), 1), 1)
        for r in range(ntasks):
            host = nodes[min(r // per_node, len(nodes) - 1)]
            out.write(f"#  Rank {r:2d} Group  0 Pid {os.getpid() + r:6d} on {host:>10} device {r % per_node:2d} "
                      f"[0x{0x18 + 16 * (r % per_node):02x}] NVIDIA H100 80GB HBM3\n")
        out.write("#\n")
        out.flush()
    if hang:
        while True:  # a collective that never completes: only a signal ends it
            signal.pause()
    if error is not None:
        if rank == 0:
            host = nodes[0]
            out.write(f"{host}:{os.getpid()}:{os.getpid() + 7} [0] transport/net_ib.cc:1296 NCCL WARN {error}\n"
                      f"{host}: Test NCCL failure common.cu:1148 'unhandled system error (run with "
                      f"NCCL_DEBUG=INFO for details) / '\n .. {host} pid {os.getpid()}: Test failure common.cu:1032\n")
        sys.exit(1)
    if rank != 0:
        return 0
    ranks = ntasks if float(values.get("default.nccl.no_mpi", "0")) else max(ntasks, 2)
    gather = name == "all_gather_perf"
    factor = (ranks - 1) / ranks if gather else 2 * (ranks - 1) / ranks  # 0 for one rank: 0.00 GB/s
    redop = "none" if gather else "sum"
    out.write("#\n#                                                              out-of-place                       in-place\n"
              "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n")
    total, knee = 0.0, 8 << 20
    largest = steps[-1]
    for i, size in enumerate(steps):
        bus = busbw * size / (size + knee) * (largest + knee) / largest
        # one rank moves nothing over a link: busbw 0.00, algbw a local copy's
        alg, bus = (bus / factor, bus) if factor else (bus, 0.0)
        time_us = size / (alg * 1e3) if alg > 0 else 0.0
        bad = wrong if i == len(steps) - 1 else 0
        count = size // (4 * (ranks if gather else 1))
        place = f"{time_us:8.1f} {alg:7.2f} {bus:7.2f}"
        # the wrong elements show in the out-of-place column: the total matches the summary
        out.write(f"{size:12d}  {count:12d}     float    {redop:>4}      -1  {place} {bad:6d}  {place} {0:6d}\n")
        total += bus
    out.write(f"# Out of bounds values : {wrong} {'FAILED' if wrong else 'OK'}\n"
              f"# Avg bus bandwidth    : {total / len(steps):g} \n#\n")
    out.flush()
    return 1 if wrong else 0


def ib_write_bw(argv):
    nodes, rank, _ = step()
    _, values = scenario()
    hca, gbits, size = "mlx5_0", "--report_gbits" in argv, 65536
    for i, arg in enumerate(argv):
        if arg in ("-d", "--ib-dev") and i + 1 < len(argv):
            hca = argv[i + 1]
        elif arg.startswith("--ib-dev="):
            hca = arg.split("=", 1)[1]
        elif arg in ("-s", "--size") and i + 1 < len(argv):
            size = int(argv[i + 1])
    gbps = float(values.get("default.rail_gbps", "392"))
    for node in nodes:
        key = f"node.{node}.rail.{hca}.gbps"
        if key in values:
            gbps = min(gbps, float(values[key]))
    if rank != 0:
        return 0
    cuda = next((a for a in argv if a.startswith("--use_cuda")), None)
    out = sys.stdout
    if cuda:
        out.write("initializing CUDA\nListing all CUDA devices in system:\nCUDA device 0: PCIe address is 18:00\n\n"
                  "Picking device No. 0\n[pid = %d, dev = 0] device name = [NVIDIA H100 80GB HBM3]\n"
                  "creating CUDA Ctx\nmaking it the current CUDA Ctx\n" % os.getpid())
    unit = "Gb" if gbits else "MB"
    value = gbps if gbits else gbps * 125e6 / 1048576
    dashes = "-" * 87
    out.write(f"{dashes}\n                    RDMA_Write BW Test\n"
              f" Dual-port       : OFF\t\tDevice         : {hca}\n"
              " Number of qps   : 1\t\tTransport type : IB\n Connection type : RC\t\tUsing SRQ      : OFF\n"
              " PCIe relax order: ON\n ibv_wr* API     : ON\n TX depth        : 128\n CQ Moderation   : 1\n"
              " Mtu             : 4096[B]\n Link type       : IB\n Max inline data : 0[B]\n"
              f" rdma_cm QPs\t : OFF\n Data ex. method : Ethernet\n{dashes}\n"
              f" #bytes     #iterations    BW peak[{unit}/sec]    BW average[{unit}/sec]   MsgRate[Mpps]\n"
              f" {size:<10d} {5000:<10d}       {value:.2f}             {value:.2f}  \t\t   {gbps * 125e6 / size / 1e6:.6f}\n"
              f"{dashes}\n")
    out.flush()
    return 0


def main():
    name = os.path.basename(sys.argv[0])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if name == "ib_write_bw":
        return ib_write_bw(sys.argv[1:])
    if name in ("all_reduce_perf", "all_gather_perf"):
        return collective(name, sys.argv[1:])
    die(f"run as all_reduce_perf, all_gather_perf or ib_write_bw, not {name}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
