"""The config schema: every key of config.toml, keyed by its full dotted path, with its type,
default, bounds, unit and meaning (in the manner of ReFrame's reframe/schemas/config.json).

    KEYS["dcgm.timeout_s"] -> Key(type="float", default=1800.0, low=0.1, high=14400.0,
                                  unit="seconds", doc="...")

This one table is what config.py validates a file against, where the section records
(configsections.py) take their defaults, what `--check-config` lists, and what the key
reference of docs/configuration.md and of gpu-healthcheck(8) is generated from
(healthcheck/configdoc.py; tests/unit/test_configschema.py keeps them equal).  A bound belongs to
its own dotted key: `[dcgm] timeout_s` and `[probe] timeout_s` are two keys with two bounds.

Types: bool, int, float, str, path (a str that must be absolute), list (of strings; `choices`
bounds its items), choice (one of `choices`; TOML's true and false read as the words), ports (a
count, or a list of "hca:port" names), nodes (a count of nodes or a share of the cluster).
`shape` names an entry validator in configsections.py (deep_floors, internode_floors).  A default of
None means the key is unset by default; `unset` says what that means.  Bounds are inclusive;
`why` is said with the bound in an error.

Kept to data and one small class: the prolog imports it (python -X importtime).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple


MAX_GPU_MIB = 288 * 1024  # the largest GPU memory shipping (B300: 288 GB)
MAX_NODES = 100000
DEEP_FLOOR_METRICS = ("hbm_gbps", "gflops", "nvlink_gbps", "nvlink_link_gbps")
# The levels a job may ask for (cli.LEVELS; `job_levels`): what that list may hold.
PROBE_LEVELS = ("quick", "full", "deep")
INTERNODE_COLLECTIVES = ("all_reduce_perf", "all_gather_perf")
AUTO_TRUE_FALSE = ("auto", "true", "false")
DAY = 86400.0


class Key:
    """One key's entry.  A plain class rather than a record: the ~100 entries are built at every
    import of the config, and a namedtuple class costs more to make than the entries."""

    __slots__ = ("type", "default", "doc", "low", "high", "unit", "why", "choices", "unset", "shape", "see")

    def __init__(self, type: str, default: Any, doc: str,  # noqa: A002  (the schema's word)
                 low: Optional[float] = None, high: Optional[float] = None, unit: str = "",
                 why: str = "", choices: Tuple[str, ...] = (), unset: str = "", shape: str = "",
                 see: str = "") -> None:
        self.type = type
        self.default = default
        self.doc = doc  # one or two sentences: what the key does
        self.low = low  # inclusive bounds of a number
        self.high = high
        self.unit = unit
        self.why = why  # why the bound is where it is, said in the error
        self.choices = choices
        self.unset = unset  # what a key left unset (default None) means
        self.shape = shape  # an entry validator (configsections.SHAPES)
        self.see = see  # the page of docs/ that says more, e.g. "deep.md#dcgm"

    def __repr__(self) -> str:
        return f"Key({', '.join(f'{name}={getattr(self, name)!r}' for name in self.__slots__)})"


_S = "seconds"
_SHARE = ""  # a fraction: its bounds say it
_ON_PATH = "found on PATH, else /usr/bin/"
_CHECKS = "checks.md#the-checks"

# The sections, in the order --check-config lists them, and what each is for.
SECTIONS: Dict[str, str] = {
    "": "keys outside any section",
    "drain": "how much of the cluster may be drained",
    "probe": "the CUDA allocation probe (--level quick and full)",
    "deep": "--level deep: on-device memory, bandwidth and compute tests",
    "dcgm": "the DCGM bridge: dcgmi diag at --level deep, dcgmi health on --node",
    "repair": "the repair loop: reset or reboot a node we drained, validate, resume",
    "checks": "which checks run",
    "thresholds": "the limits of the checks on one node",
    "network": "the RDMA ports",
    "internode": "the multi-node checks: --internode-sweep on a submit host, --gang in a job",
    "suspects": "--suspects: black holes and lemons from Slurm's accounting and our own history",
}

KEYS: Dict[str, Key] = {
    "state_dir": Key("path", "/var/lib/gpu-healthcheck", "Where the prolog keeps each job's "
                     "baseline and a drain not yet applied (created 0700); an absolute path."),
    "kernel_log": Key("str", "/dev/kmsg", "Where Xid lines are read: /dev/kmsg, or a file in "
                      "kmsg, dmesg, dmesg -T or journalctl -k form."),
    "kernel_log_marker": Key("bool", True, "On /dev/kmsg the prolog marks where the log stands by "
                             "writing one record and reading back its sequence number; false reads "
                             "the whole buffer instead (7-40 ms on a big node) and writes nothing.",
                             see="trust.md#the-prologs-marker-in-the-kernel-log"),
    "scontrol": Key("str", None, "Slurm's scontrol, to drain and resume with.",
                    unset=_ON_PATH + "scontrol"),
    "scontrol_timeout_s": Key("float", 10.0, "Deadline of one scontrol call.", 0.1, 600.0, _S,
                              "0 would fail every drain"),
    "sysfs_root": Key("str", "/sys", "Where NVIDIA PCI functions are counted: sysfs listing more "
                      "GPUs than NVML is a GPU that fell off the bus."),
    "proc_root": Key("str", "/proc", "Where the uptime is read (the driver's age, for the boot grace)."),
    "node_name": Key("str", None, "This node's Slurm NodeName.",
                     unset="$SLURMD_NODENAME, else the short hostname"),
    "gres_conf": Key("str", None, "slurmd's gres.conf, to turn SLURM_JOB_GPUS (gres indices) into "
                     "GPUs; slurm.conf is read from the same directory (config-less sites: slurmd's "
                     "conf-cache copy).", unset="gres.conf beside $SLURM_CONF, else /etc/slurm/gres.conf",
                     see="configuration.md#gresconf-and-slurmconf"),
    "expected_gpus": Key("int", None, "GPUs this node must have; fewer fail.", 0,
                         unset="not checked: sysfs and NVML are compared instead"),
    "expected_nvlinks": Key("int", None, "NVLink links each GPU must have active; set it on SKUs "
                            "with links off by design.", 0,
                            unset="every link NVML says the GPU has"),
    "nvml_timeout_s": Key("float", 10.0, "Deadline for the whole NVML read of every GPU.", 0.1,
                          600.0, _S, "0 would call every GPU lost"),
    "expect_ecc": Key("bool", None, "Whether this site runs its GPUs with ECC on: false makes ECC "
                      "off info on every GPU, true a warning on every GPU; unset, workstation boards (RTX, "
                      "Quadro, GeForce, TITAN: they ship with ECC off) are told apart.",
                      unset="ECC off: info on workstation boards, a warning on data-centre GPUs"),
    "exclude_gpus": Key("list", (), "GPUs taken out of service (serials, GPU- UUIDs or PCI ids): "
                        "still read and reported, but every finding on them is info, never a drain.  "
                        "In a prolog or epilog a GPU in no gres.conf record is out of service the same "
                        "way."),
    "dcgmi": Key("str", None, "DCGM's command line, for the DCGM bridge.",
                 unset=_ON_PATH + "dcgmi", see="deep.md#dcgm"),
    "nvidia_smi": Key("str", None, "NVIDIA's nvidia-smi, for the repair loop's GPU reset and -pm.",
                      unset=_ON_PATH + "nvidia-smi"),
    "nvidia_smi_timeout_s": Key("float", 20.0, "Deadline of one nvidia-smi call; in a budgeted run at "
                                "most a fifth of act_budget_s.", 1.0, 3600.0, _S,
                                "a GPU reset takes seconds"),
    "act_budget_s": Key("float", 50.0, "`--node --act` (HealthCheckProgram) ends within this; the "
                        "NVML, probe, scontrol and nvidia-smi deadlines shrink to fit (NVML and scontrol 15 % "
                        "each, the probe what is left).", 5.0, 3600.0,
                        _S, "keep it below Slurm's 60 s HealthCheckProgram limit"),
    "boot_grace_s": Key("float", 300.0, "After the driver loads, fabric, NVLink and persistence "
                        "state are not judged for this long (unknown, never a drain).", 0.0, DAY, _S),
    "xid_window_s": Key("float", 0.0, "--node: Xids of the last this many seconds count (0: since "
                        "boot); prolog and epilog judge the job's own window.", 0, unit=_S),
    "xid_escalate_after": Key("int", 3, "A failing Xid on a GPU whose Xids were acknowledged this "
                              "many times escalates to RMA.", 1, 1000, "acknowledgements"),
    "job_levels": Key("list", ("quick",), "The probe levels a job may ask for with "
                      "--gpu-healthcheck= (any user can set that ask); another ask is logged and "
                      "runs the default level.  The SPANK plugin's own prolog passes --level, bounded by its "
                      "allow_full= and allow_deep=.", choices=PROBE_LEVELS),
    "history_file": Key("str", None, "One JSON line per run, rotated at history_max_bytes.",
                        unset="<state_dir>/history.jsonl"),
    "history_max_bytes": Key("int", 1 << 20, "The size at which the history file is rotated.", 0,
                             unit="bytes"),
    "metrics_file": Key("str", None, "node_exporter textfile output, e.g. "
                        "/var/lib/node_exporter/gpu_healthcheck.prom.",
                        unset="no node_exporter textfile", see="observability.md"),
    "hpc_job_mapping_dir": Key("str", None, "dcgm-exporter's --hpc-job-mapping-dir "
                               "(DCGM_HPC_JOB_MAPPING_DIR): the prolog of a job that starts adds its job id to "
                               "the file of each of its GPUs (named by GPU index, one job id a line), the "
                               "epilog takes it out, so that dcgm-exporter labels the GPU's series with "
                               "hpc_job.", unset="no job mapping written",
                               see="observability.md#jobs-on-gpus-dcgm-exporters-hpc_job"),
    "journal": Key("bool", True, "Send entries to journald where its socket exists."),

    "drain.max_fraction": Key("float", 0.1, "Share of the cluster's GPU nodes this tool may hold "
                              "drained at once (at least one node); past it, drains are refused "
                              "and noted in the node's Comment (--cluster lists them).", 0.0, 1.0, _SHARE),
    "drain.report_only": Key("bool", False, "Never drain or resume, never fail a job, never "
                             "repair: log and report what would have been done (a first rollout).",
                             see="../README.md#3-roll-out-with-report_only-first"),

    "probe.enabled": Key("bool", True, "Run the CUDA probe: allocate, write a pattern and read it "
                         "back on each GPU under test."),
    "probe.quick_mib": Key("int", 256, "MiB the probe allocates, writes and reads back per GPU at "
                           "--level quick (the prolog).", 1, MAX_GPU_MIB, "MiB",
                           "no GPU has more memory"),
    "probe.full_fraction": Key("float", 0.9, "Share of free memory tested at --level full.", 0.01,
                               1.0, "a share of free memory"),
    "probe.timeout_s": Key("float", 30.0, "Deadline of one GPU's probe child, from its start; "
                           "past it the GPU fails.", 0.1, 3600.0, _S, "0 would fail every probe"),

    "deep.enabled": Key("bool", True, "Run the deep level's on-device tests at --level deep.",
                        see="deep.md"),
    "deep.timeout_s": Key("float", 300.0, "Deadline of one GPU's deep child (and of the peer "
                          "child).", 0.1, 3600.0, _S, "0 would fail every probe"),
    "deep.sibling_ratio_warn": Key("float", 0.85, "A GPU below this share of its same-model "
                                   "siblings' median warns.", 0.0, 1.0, _SHARE),
    "deep.sibling_ratio_fail": Key("float", 0.7, "A GPU below this share of its siblings' median "
                                   "fails.", 0.0, 1.0, _SHARE),
    "deep.floor_fraction": Key("float", 0.6, "A GPU below this share of its model's datasheet "
                               "peak fails.", 0.0, 1.0, _SHARE, see="deep.md#floors"),
    "deep.pcie_fraction": Key("float", 0.4, "Host-device bandwidth below this share of the link's "
                              "current gen x width rate, per direction, fails.", 0.0, 1.0, _SHARE),
    "deep.floors": Key("list", (), "Site peaks, \"MODEL:METRIC=VALUE\" with METRIC one of hbm_gbps, "
                       "gflops, nvlink_gbps, nvlink_link_gbps, that floor_fraction applies to.",
                       shape="deep_floors", see="deep.md#floors"),
    "deep.bandwidth_mib": Key("int", 1024, "The size of each HBM bandwidth buffer.", 1, MAX_GPU_MIB,
                              "MiB"),
    "deep.duration_s": Key("float", 30.0, "Seconds of back-to-back compute launches per GPU "
                           "(throttling takes seconds to show); a GPU's deadline is timeout_s plus "
                           "this.", 0.5, 3600.0, "seconds of compute load per GPU"),
    "deep.memtest_passes": Key("int", 1, "Times the whole memory test runs, each pass with its own "
                               "patterns.", 1, 100, "passes of the memory test"),

    "dcgm.enabled": Key("choice", "auto", "auto: dcgmi diag and health where dcgmi is installed; "
                        "true: a missing dcgmi is unknown; false: never.", choices=AUTO_TRUE_FALSE,
                        see="deep.md#dcgm"),
    "dcgm.level": Key("int", 2, "The run level of dcgmi diag -r N at --level deep.", 1, 4,
                      "dcgmi diag run levels"),
    # NVIDIA's dcgmi diag reference (docs.nvidia.com/datacenter/dcgm/latest/reference/
    # command-line-reference/dcgmi/dcgmi-diag.html) puts -r 2 at about two minutes, -r 3 at about
    # 15 and -r 4 at "extended, longer-running"; DCGM's user guide's table of run levels gives it
    # one to two hours.  Four hours leaves a slow node room; a day would hide a hang.
    "dcgm.timeout_s": Key("float", 1800.0, "Deadline of dcgmi diag: -r 2 takes minutes, -r 3 "
                          "about 15 minutes, -r 4 one to two hours.", 0.1, 4 * 3600.0, _S,
                          "0 fails every diag; -r 4 runs for hours"),
    "dcgm.health_timeout_s": Key("float", 10.0, "Deadline of dcgmi health on --node runs.", 0.1,
                                 600.0, _S),

    "repair.enabled": Key("bool", False, "Repair a node this tool drained once it is idle, on "
                          "`--node --act`; `--repair` runs the loop anyway.", see="repair.md"),
    "repair.max_attempts": Key("int", 2, "The same GPU repaired this many times within window_s "
                               "marks the node rma.", 1, 1000, "repairs of one GPU"),
    "repair.window_s": Key("float", 7 * DAY, "The window in which a GPU's repairs are counted.", 0.0,
                           10 * 365 * DAY, _S),
    "repair.cooldown_s": Key("float", 3600.0, "At most one repair attempt per node within this "
                             "many seconds.", 0.0, 365 * DAY, _S),
    "repair.max_concurrent": Key("nodes", 1, "Nodes resetting or rebooting at once, cluster-wide: "
                                 "a count (3), or a share of the cluster's GPU nodes (0.05 or "
                                 "\"5%\"; at least one node)."),
    "repair.bug_report": Key("str", None, "nvidia-bug-report.sh, run for the RMA evidence.",
                             unset=_ON_PATH + "nvidia-bug-report.sh"),
    "repair.bug_report_timeout_s": Key("float", 300.0, "Deadline of nvidia-bug-report.sh.", 1.0,
                                       7200.0, _S),
    "repair.bug_report_max_bytes": Key("int", 64 << 20, "Size cap of the bug report kept.", 1024,
                                       1 << 34, "bytes"),
    "repair.systemd_run": Key("str", None, "systemd-run, to run nvidia-bug-report.sh as a transient "
                              "unit outside the run that marks rma.",
                              unset=_ON_PATH + "systemd-run; absent: a detached process"),

    "checks.disabled": Key("list", (), "Check ids to skip (`gpu-healthcheck --list-checks` lists "
                           "them).", see=_CHECKS),

    "thresholds.ecc_volatile_corrected": Key("int", 1000, "Corrected (single-bit) ECC errors since "
                                             "the driver loaded above which a GPU warns.", 0,
                                             unit="errors", see=_CHECKS),
    "thresholds.retired_pages": Key("int", 60, "Retired pages at which a GPU is sent to RMA "
                                    "(NVIDIA's criterion, pre-Ampere).", 0, unit="pages", see=_CHECKS),
    "thresholds.memory_leaked_mib": Key("int", 2048, "Memory in use with no process on the GPU "
                                        "that is called leaked.", 0, unit="MiB", see=_CHECKS),
    "thresholds.pcie_width_min": Key("int", 0, "PCIe link width below which a GPU warns (0: off; "
                                     "narrower than its max is then info).", 0, unit="lanes", see=_CHECKS),
    "thresholds.thermal_margin_c": Key("int", 0, "Degrees below the slowdown threshold at which a "
                                       "GPU warns that it is about to throttle.", 0,
                                       unit="degrees C", see=_CHECKS),
    "thresholds.nvlink_errors_per_job": Key("int", 100, "NVLink CRC and replay errors (each) new "
                                            "during one job above which the epilog warns.", 0,
                                            unit="errors", see=_CHECKS),
    "thresholds.pcie_replay_per_job": Key("int", 100, "PCIe replays new during one job above which "
                                          "the epilog warns.", 0, unit="replays", see=_CHECKS),

    "network.expected_ports": Key("ports", None, "The RDMA ports that must be up: a count, or names "
                                  "like [\"mlx5_0:1\"].",
                                  unset="a down port warns; up at the prolog, down at the epilog fails",
                                  see="network.md#keys"),
    "network.min_rate_gbps": Key("float", 0.0, "A port slower than this warns (0: off; the "
                                 "comparison with the node's fastest port of the same HCA model "
                                 "still applies).", 0, unit="Gb/s"),
    "network.gpudirect": Key("choice", "auto", "GPUDirect RDMA (nvidia_peermem) expected: auto where "
                             "a port shares a PCIe switch with a GPU, true on every node with GPUs "
                             "and ports, false never.", choices=AUTO_TRUE_FALSE),
    "network.symbol_error_per_job": Key("int", 10, "Symbol errors new during one job above which "
                                        "ib.errors fails (rdma-core's ibqueryerrors threshold).", 0,
                                        unit="errors"),
    "network.link_error_recovery_per_job": Key("int", 10, "Link error recoveries new during one "
                                               "job above which ib.errors fails.", 0, unit="errors"),
    "network.link_downed_per_job": Key("int", 0, "Link-downs new during one job above which "
                                       "ib.errors fails (one breaks every connection over the port).",
                                       0, unit="errors"),
    "network.port_rcv_errors_per_job": Key("int", 10, "Receive errors new during one job above "
                                           "which ib.errors fails.", 0, unit="errors"),
    "network.local_link_integrity_errors_per_job": Key("int", 10, "Local link integrity errors new "
                                                       "during one job above which ib.errors "
                                                       "fails.", 0, unit="errors"),
    "network.excessive_buffer_overrun_errors_per_job": Key("int", 10, "Excessive buffer overruns "
                                                           "new during one job above which "
                                                           "ib.errors fails.", 0, unit="errors"),

    "internode.partition": Key("str", None, "The partition the sweep's pair jobs run in.",
                            unset="the cluster's default partition", see="network.md#the-internode-sweep"),
    "internode.reservation": Key("str", None, "Run the sweep's jobs only inside this (maintenance) "
                              "reservation.", unset="no reservation"),
    "internode.collective": Key("choice", "all_reduce_perf", "The nccl-tests program each job runs.",
                             choices=INTERNODE_COLLECTIVES),
    "internode.nccl_tests": Key("str", None, "The directory of nccl-tests' binaries.",
                             unset="found on PATH"),
    "internode.collective_args": Key("list", ("-b", "1G", "-e", "4G", "-f", "2", "-g", "1"),
                                  "The collective's arguments."),
    "internode.srun_args": Key("list", (), "srun's arguments in each job, e.g. [\"--mpi=pmix\"] for an "
                            "MPI build of nccl-tests."),
    "internode.tasks_per_node": Key("int", 8, "srun --ntasks-per-node: one rank per GPU.", 1, 1024,
                                 "tasks"),
    "internode.ib_write_bw": Key("str", None, "perftest's ib_write_bw, run with --use_cuda on each "
                              "HCA of rails.", unset="found on PATH"),
    "internode.rails": Key("list", (), "HCAs to test with ib_write_bw between a pair's nodes, e.g. "
                        "[\"mlx5_0\"]."),
    "internode.rail_floor_gbps": Key("float", 0.0, "A rail below this fails its pair (0: no rail "
                                  "floor).", 0, unit="Gb/s"),
    "internode.busbw_floor_gbps": Key("float", 0.0, "A pair below this bus bandwidth fails (0: the "
                                   "median rule only).", 0, unit="GB/s"),
    "internode.floors": Key("list", (), "Floors per GPU model, \"GRES_TYPE:busbw_gbps=GBPS\" keyed by "
                         "the type of Slurm's Gres=gpu:TYPE:N; a job takes the lowest floor of its "
                         "nodes, a model without one busbw_floor_gbps.", shape="internode_floors",
                         see="network.md#floors-per-gpu-model"),
    "internode.median_ratio_fail": Key("float", 0.7, "A pair below this share of its round's median "
                                    "fails.", 0.0, 1.0, _SHARE),
    "internode.partners": Key("int", 2, "Known-good partners each suspect runs with.", 1, 16,
                           "partners"),
    "internode.group_size": Key("int", 0, "Nodes per group of the optional scale round (0: off).", 0,
                             MAX_NODES, "nodes"),
    "internode.time_limit_s": Key("float", 600.0, "Each job's collective (and rail test) runs at most "
                               "this long under timeout(1); the job's --time is this in whole "
                               "minutes plus one.", 10.0, DAY, _S),
    "internode.sbatch": Key("str", None, "Slurm's sbatch.", unset=_ON_PATH + "sbatch"),
    "internode.squeue": Key("str", None, "Slurm's squeue.", unset=_ON_PATH + "squeue"),
    "internode.scancel": Key("str", None, "Slurm's scancel.", unset=_ON_PATH + "scancel"),
    "internode.sbatch_timeout_s": Key("float", 30.0, "Deadline of one sbatch, squeue or scancel call.",
                                   1.0, 600.0, _S),
    "internode.output_dir": Key("str", None, "Where the jobs write their output; the jobs' first "
                             "nodes must share it with the submit host.", unset="<state_dir>/fabric"),
    "internode.gang_bytes": Key("int", 256 << 20, "--gang: the collective's message size.", 8, 1 << 36,
                             "bytes", see="network.md#the-gang-check-at-job-start"),
    "internode.gang_timeout_s": Key("float", 120.0, "--gang: the whole check's deadline (each "
                                 "collective gets a fifth of it).", 5.0, 3600.0, _S),
    "internode.srun": Key("str", None, "--gang: the srun that runs the collective inside the job's "
                       "own allocation (--overlap).", unset=_ON_PATH + "srun"),
    "suspects.act": Key("bool", False, "--suspects --act sends suspects to verification (drained "
                        "after their jobs, then the repair loop's deep level) only where this is also "
                        "true.", see="suspects.md#what-happens-to-a-suspect"),
    "suspects.verify_cooldown_s": Key("float", 7 * DAY, "A node --suspects --act sent to verification "
                                      "is not sent again for this long (its evidence stays in the "
                                      "window after it was verified).", 0.0, 366 * DAY, _S,
                                      see="suspects.md#what-happens-to-a-suspect"),
    "suspects.internode_retest": Key("bool", False, "A suspect that passes its verification is left "
                                  "drained for the next --internode-sweep's re-test with known-good "
                                  "partners instead of resumed (where the internode sweep runs).",
                                  see="suspects.md#what-happens-to-a-suspect"),
    "suspects.sacct": Key("str", None, "Slurm's sacct (the accounting door of --suspects).", unset=_ON_PATH + "sacct",
                          see="suspects.md"),
    "suspects.sacct_timeout_s": Key("float", 60.0, "Deadline of one sacct call (one piece of the "
                                    "window).", 1.0, 3600.0, _S, see="suspects.md"),
    "suspects.sacct_max_bytes": Key("int", 64 << 20, "Output kept of one sacct call; more splits "
                                    "the piece in two.", 1 << 16, 1 << 32, "bytes",
                                    see="suspects.md"),
    "suspects.sacct_piece_s": Key("float", DAY, "The window is read from sacct in pieces this long.", 600.0, 366 * DAY, _S,
                                  see="suspects.md"),
    "suspects.lookback_s": Key("float", 14 * DAY, "--since's default: this long before --until.", 3600.0, 3660 * DAY, _S,
                               see="suspects.md"),
    "suspects.half_life_s": Key("float", 14 * DAY, "A job's evidence halves every this long before "
                                "--until.", 3600.0, 3660 * DAY, _S, see="suspects.md"),
    "suspects.black_hole_s": Key("float", 60.0, "A job that fails within this of its start feeds a "
                                 "black hole ...", 1.0, DAY, _S, see="suspects.md"),
    "suspects.black_hole_jobs": Key("int", 5, "... this many such jobs in one incident ...", 2, 100000, "jobs",
                                    see="suspects.md"),
    "suspects.black_hole_users": Key("int", 3, "... of at least this many users ...", 1, 10000, "users",
                                     see="suspects.md"),
    "suspects.black_hole_share": Key("float", 0.8, "... and at least this share of the jobs the "
                                     "node started meanwhile.", 0.0, 1.0, _SHARE,
                                     see="suspects.md"),
    "suspects.incident_gap_s": Key("float", 3600.0, "Failures (and one user's jobs) on one node "
                                   "closer than this are one incident.", 1.0, 30 * DAY, _S,
                                   see="suspects.md"),
    "suspects.lemon_fdr": Key("float", 0.01, "False discovery rate of the lemon test across nodes "
                              "(Benjamini-Hochberg).", 0.0, 1.0, _SHARE, see="suspects.md"),
    "suspects.lemon_users": Key("int", 2, "A lemon's excess failures come from at least this many "
                                "users.", 1, 10000, "users", see="suspects.md"),
    "suspects.user_cap": Key("float", 2.0, "The user with the largest excess of failures on a node "
                             "counts at most this much more than the next.", 0.5, 1000.0, "failures",
                             see="suspects.md"),
    "suspects.lemon_min_excess": Key("float", 3.0, "A lemon fails at least this many (decayed) jobs "
                                     "above the fleet's expectation.", 0.0, 100000.0, "failures",
                                     see="suspects.md"),
    "suspects.remediations": Key("int", 5, "The lemon rule of our own history: this many resets or "
                                 "reboots of a node or a GPU (names it suspect; a verified suspect "
                                 "with them is held as a lemon) ...", 2, 1000, "remediations",
                                 see="suspects.md"),
    "suspects.remediation_window_s": Key("float", 7 * DAY, "... within this long (NVSentinel's 5 in "
                                         "7 days).", 3600.0, 366 * DAY, _S, see="suspects.md"),
    "suspects.xid_repeat_window_s": Key("float", DAY, "Xid 13 or 31 twice on one GPU within this "
                                        "names it.", 60.0, 366 * DAY, _S, see="suspects.md"),
    "suspects.same_xid_reboots": Key("int", 2, "The same Xid back after this many reboots names the "
                                     "node (gpud's rule).", 1, 100, "reboots", see="suspects.md"),
    "suspects.counter_window_s": Key("float", 7 * DAY, "The counter rules look at each GPU serial's "
                                     "counters in the history over this long before --until.",
                                     3600.0, 366 * DAY, _S, see="suspects.md"),
    "suspects.sbe_ratio": Key("float", 10.0, "ecc_sbe_rate: corrected ECC errors per hour under load "
                              "at least this many times the median of the node's other GPUs ...",
                              1.0, 1e6, "times", see="suspects.md"),
    "suspects.sbe_min_errors": Key("int", 100, "... and at least this many of them in the window.",
                                   1, 10 ** 12, "errors", see="suspects.md"),
    "suspects.remap_low_growth": Key("int", 1, "remap_headroom: memory banks with low or no row-remap "
                                     "availability grew by this many in the window.", 1, 100000,
                                     "banks", see="suspects.md"),
    "suspects.retired_pages_growth": Key("int", 1, "retired_pages: retired pages grew by this many in "
                                         "the window.", 1, 100000, "pages", see="suspects.md"),
    "suspects.pcie_replay_growth": Key("int", 100, "pcie_replay: PCIe replays grew by this many in the "
                                       "window.", 1, 10 ** 12, "replays", see="suspects.md"),
    "suspects.nvlink_replay_growth": Key("int", 100, "nvlink_replay: NVLink replay errors (all links) "
                                         "grew by this many in the window.", 1, 10 ** 12, "errors",
                                         see="suspects.md"),
}

# Old names still read: an old dotted name (a section, or a key) -> the name it has now.  A file
# that uses one loads as if it used the new name; the docs list it as deprecated.  Setting both
# is an error.  A key's alias stays in its section (a section's alias carries its keys along).
ALIASES: Dict[str, str] = {
    # "fabric" is NVSwitch's word (checks/fabric.py); the multi-node checks were [fabric] first
    "fabric": "internode",
    "suspects.fabric_retest": "suspects.internode_retest",
}

DEFAULTS: Dict[str, Any] = {path: key.default for path, key in KEYS.items()}


def section_of(path: str) -> str:
    """"dcgm" for "dcgm.timeout_s", "" for a top-level key."""
    return path.rpartition(".")[0]
