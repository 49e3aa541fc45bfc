"""Command line: `gpu-healthcheck --node | --prolog | --epilog | --list-checks | ...` (CONTRACTS §1).

    main(["--node", "--json"]) -> exit code

Exit codes: --node 0 healthy, 1 warning, 2 failure, 3 unknown (could not check);
--prolog non-zero exactly when the job must not start here; --epilog non-zero exactly when it
drained the node.  A bug in gpu-healthcheck itself never drains and never fails a job: its
traceback is logged loudly and prolog/epilog exit 0 (--node exits 3).
"""

from __future__ import annotations

import atexit
import gc
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Any, List, NamedTuple, NoReturn, Optional, Sequence, TextIO, Union

from . import __version__
from .clitext import EPILOG_TEXT  # --help's epilog and the man page's EXIT STATUS
from .decide import exitcodes
from .decide.levels import LEVELS
from .model import Terminated, UsageError

if TYPE_CHECKING:  # imported lazily at run time: every job start waits for this process
    import argparse

    from .config import Config


# What a config error does to a mode's run (the one mapping, _config below):
EXIT = "exit"  # one line on stderr, exit 3 (CONFIG_ERROR)
DEFAULTS = "defaults"  # the run goes on with the built-in defaults, the error among its warnings
QUIET = "quiet"  # the built-in defaults (the file may be unreadable to a job's user)
OWN = "own"  # the command reads the config itself (--check-config) or needs none


class Command(NamedTuple):
    """One mode's entry in the dispatch table: the module in healthcheck/commands/ whose
    main(args, config, started) runs it, what a config error does, and whether the guard
    turns SIGTERM into Terminated and a bug of ours into a logged internal error."""

    module: str
    config: str = EXIT
    sigterm: bool = False
    crash: bool = False
    # a mode that only acts (or writes what acting reads) stops at a refused config; the node
    # pipeline's modes run their checks report_only and say so (commands/node.py)
    stop_on_refused: bool = False
    # the mode's name in the history, the journal and the metrics (default: its flag's)
    name: str = ""


# mode (the argparse dest of its flag) -> its command; each module is imported only when its mode
# runs, so a prolog loads the node pipeline and nothing else.
COMMANDS = {
    "node": Command("node", EXIT, sigterm=True, crash=True),
    "repair": Command("repair", EXIT, sigterm=True, crash=True),
    # a broken config must not stop the checks that protect the next job
    "prolog": Command("prolog", DEFAULTS, sigterm=True, crash=True),
    "epilog": Command("prolog", DEFAULTS, sigterm=True, crash=True),
    "history": Command("history"),
    "cluster": Command("cluster"),
    "list_checks": Command("admin", OWN),
    "check_config": Command("admin", OWN),
    # a report must never add a failure to the job: a bug is one line (jobreport.crashed)
    "job_report": Command("jobreport", QUIET, crash=True),
    "ack": Command("ack", stop_on_refused=True),
    # SIGTERM: the sweep cancels its jobs and drains nothing (commands/internodesweep.py); its
    # records keep the name they were first written with
    "internode_sweep": Command("internodesweep", sigterm=True, stop_on_refused=True, name="fabric-sweep"),
    "gang": Command("gang", stop_on_refused=True),
    "suspects": Command("suspects"),
    "replay_failures": Command("suspects"),
}



def _on_sigterm(signum: int, frame: object) -> None:
    # A second SIGTERM must not interrupt the unwinding (probe children killed, jobs cancelled)
    # or the last log lines.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated("stopped by SIGTERM")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"--history takes a number of runs, got {text!r}") from None
    if value < 1:
        raise UsageError(f"--history takes a number of runs of at least 1, got {value}")
    return value


# An old flag -> the flag it is now: it works as the new one, with a note on stderr (stdout
# may be a JSON document a script parses).
OLD_FLAGS = {"--fabric-sweep": "--internode-sweep"}


def build_parser() -> "argparse.ArgumentParser":
    import argparse

    class _OldName(argparse.Action):
        """An old flag: sets its new flag's dest, and says it is deprecated."""

        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                     values: object, option_string: Optional[str] = None) -> None:
            print(f"gpu-healthcheck: {option_string} is deprecated, use {OLD_FLAGS[str(option_string)]} "
                  f"(the same command)", file=sys.stderr)
            setattr(namespace, self.dest, True)

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> "NoReturn":  # type: ignore[override]
            # argparse exits 2 (= fail for --node): a typo must not read as a sick node
            if message.startswith("unrecognized arguments: "):
                words = message.split(": ", 1)[1].split()
                options = [w for w in words if w.startswith("-")]
                if options:
                    message = (f"unknown option{'s' if len(options) > 1 else ''} "
                               f"{' '.join(options)}")
                else:
                    message = f"unexpected argument{'s' if len(words) > 1 else ''} {' '.join(words)}"
            raise UsageError(message)

    parser = Parser(
        prog="gpu-healthcheck", epilog=EPILOG_TEXT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="GPU node health checks for Slurm: NVML state, a real CUDA allocation "
                    "probe and kernel Xid events; drains a bad node with a reason naming the GPU.")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--node", action="store_true", help="check this node (by hand, or as "
                      "HealthCheckProgram with --act)")
    what.add_argument("--repair", action="store_true", help="repair this node if gpu-healthcheck "
                      "drained it and it is idle: reset GPUs or ask Slurm for a reboot, prove "
                      "it healthy with a full check, resume; escalate to rma (docs/repair.md)")
    what.add_argument("--prolog", action="store_true", help="Slurm Prolog: check the job's GPUs "
                      "before it starts; drain and requeue on a fault")
    what.add_argument("--epilog", action="store_true", help="Slurm Epilog: judge what changed "
                      "during the job; drain on uncorrectable errors")
    what.add_argument("--history", nargs="?", type=_positive_int, const=20, metavar="N",
                      help="print the last N verdicts of this node (default 20)")
    what.add_argument("--cluster", action="store_true", help="list the nodes drained by "
                      "gpu-healthcheck (one scontrol call), with their reasons in columns")
    what.add_argument("--list-checks", action="store_true", help="list every check: id (for "
                      "[checks] disabled), severity, action, threshold key, what it catches")
    what.add_argument("--check-config", action="store_true", help="validate the configuration "
                      "(every error in one pass; warnings for paths that are missing) and print "
                      "each key's effective value and where it came from")
    what.add_argument("--job-report", action="store_true", help="inside a job, as its user: "
                      "which of the job's GPUs is at fault (read-only; the SPANK plugin runs it "
                      "when a task fails)")
    what.add_argument("--ack", action="store_true", help="the admin has dealt with the Xids "
                      "seen so far (all GPUs, or --gpus): they stop counting, new ones count")
    what.add_argument("--internode-sweep", action="store_true", help="on a submit host: pair "
                      "idle nodes in exclusive Slurm jobs running nccl-tests (and ib_write_bw), find "
                      "the bad node, drain it with --act; with --act also re-test with known-good "
                      "partners the fabric drains the repair loop rebooted, resuming those that "
                      "pass (docs/network.md)")
    what.add_argument("--fabric-sweep", action=_OldName, nargs=0, dest="internode_sweep",
                      default=False, help="deprecated: the old name of --internode-sweep")
    what.add_argument("--gang", action="store_true", help="inside a multi-node job, one task per "
                      "node: a short collective over the job's nodes; on failure find the node "
                      "(drained and the job requeued by the SPANK plugin's privileged side)")
    what.add_argument("--suspects", action="store_true", help="black holes and lemons from sacct "
                      "and this host's history, with evidence; changes nothing without --act "
                      "(docs/suspects.md)")
    what.add_argument("--replay-failures", metavar="FILE.csv", help="a GPU failure history "
                      "(time,node,serial,kind) through the repeat rules and the naive rule")
    what.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--act", action="store_true", help="with --node: drain on failure, "
                        "resume our own drain once the node is healthy; with --suspects (and "
                        "[suspects] act = true): drain each suspect for the repair loop's "
                        "verification at --level deep")
    parser.add_argument("--config", metavar="FILE", help="configuration file (TOML)")
    parser.add_argument("--gres", action="store_true", help="with --check-config: this node's "
                        "job-GPU -> device -> NVML map (gres index, device file, NVML index, "
                        "UUID), as the prolog computes it from gres.conf and slurm.conf")
    parser.add_argument("--nodes", metavar="HOSTLIST", help="with --internode-sweep: only these "
                        "nodes")
    parser.add_argument("--partition", metavar="P", help="with --internode-sweep: the partition "
                        "to sweep and run the jobs in ([internode] partition)")
    parser.add_argument("--since", metavar="WHEN", help="with --suspects: from WHEN (ISO date or "
                        "time, or a duration before now: 14d; default [suspects] lookback_s)")
    parser.add_argument("--until", metavar="WHEN", help="with --suspects: up to WHEN (default now)")
    parser.add_argument("--sacct-file", metavar="FILE", help="with --suspects: saved `sacct --parsable2`")
    parser.add_argument("--gpus", metavar="LIST", help="with --node: only these NVML indices, "
                        "e.g. 0,3")
    parser.add_argument("--level", choices=LEVELS, default=None,
                        help="CUDA probe size: quick (256 MiB, the default) or full (a share of "
                             "free memory); deep adds the on-device memory, bandwidth and "
                             "compute tests (minutes; never in the default prolog) and dcgmi "
                             "diag where DCGM is installed; --prolog without it takes the job's "
                             "--gpu-healthcheck= choice ($SPANK_GPU_HEALTHCHECK_LEVEL) where the "
                             "config's job_levels allows it")
    return parser


_FAST_FLAGS = {"--node", "--prolog", "--epilog", "--json", "--act"}


def _fast_args(argv: List[str]) -> Optional["argparse.Namespace"]:
    """The plain forms slurmd and HealthCheckProgram run (`--prolog`, `--node --act`, ...),
    without building the argparse parser (~4 ms of every job start).  Anything else, including
    every mistake, goes to argparse for its checks and messages."""
    level = None
    if len(argv) >= 2 and argv[-2] == "--level" and argv[-1] in LEVELS:  # what the plugin runs
        argv, level = argv[:-2], argv[-1]
    modes = [a for a in argv if a in ("--node", "--prolog", "--epilog")]
    if len(modes) != 1 or len(set(argv)) != len(argv) or not set(argv) <= _FAST_FLAGS:
        return None
    from types import SimpleNamespace

    return SimpleNamespace(node=modes[0] == "--node", prolog=modes[0] == "--prolog",  # type: ignore[return-value]
                           epilog=modes[0] == "--epilog", version=False, history=None,
                           cluster=False, list_checks=False, check_config=False, ack=False,
                           job_report=False, repair=False, internode_sweep=False, gang=False, nodes=None,
                           partition=None, json="--json" in argv, act="--act" in argv,
                           config=None, gpus=None, level=level, gres=False)


def main(argv: Optional[Sequence[str]] = None, started_monotonic: Optional[float] = None) -> int:
    """One command; returns its exit status (decide.exitcodes).  `started_monotonic`: when the
    process started (entry() takes it first thing): the act budget counts from there, since
    Slurm's 60 s for HealthCheckProgram count from our start.  By default, now."""
    started = time.monotonic() if started_monotonic is None else started_monotonic
    args_list: List[str] = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(args_list, started)
    except UsageError as exc:
        print(f"gpu-healthcheck: {exc} (see --help)", file=sys.stderr)
        return exitcodes.USAGE


def _refuse_meaningless(args: "argparse.Namespace") -> str:
    """The mode asked for; --act, --gpus, --level and --gres where the mode does nothing with
    them: one line, exit 3 (a `--history --act` that ran as if --act meant something would
    mislead)."""
    # every mode of the dispatch table (the fast path's namespace holds only its own flags)
    mode = next(m for m in (*COMMANDS, "version") if getattr(args, m, None) not in (None, False))
    takes = {"act": ("node", "repair", "gang", "internode_sweep", "suspects"), "gpus": ("node", "repair", "ack"),
             "level": ("node", "repair", "prolog", "epilog", "ack"), "gres": ("check_config",),
             "nodes": ("internode_sweep",), "partition": ("internode_sweep",), "since": ("suspects",),
             "until": ("suspects",), "sacct_file": ("suspects",)}
    for option, modes in takes.items():
        if mode in ("prolog", "epilog") and option in ("act", "gpus"):
            continue  # refused below, with why (they act on the job's GPUs by themselves)
        if getattr(args, option, None) not in (None, False) and mode not in modes:
            raise UsageError(f"--{option} means nothing with --{mode.replace('_', '-')} "
                             f"(it goes with {', '.join('--' + m.replace('_', '-') for m in modes)})")
    return mode


def _main(args_list: List[str], started: float) -> int:
    args = _fast_args(args_list) or build_parser().parse_args(args_list)
    mode = _refuse_meaningless(args)
    if mode == "version":
        print(f"gpu-healthcheck {__version__}")
        return exitcodes.done_exit(True)
    return _guarded(mode, COMMANDS[mode], args, started)


def _guarded(mode: str, command: Command, args: "argparse.Namespace", started: float) -> int:
    """The one guard around every command's run: the command's module imported (a broken
    dependency is caught like a bug), its own usage refusals, the config read (with the one
    config-error mapping), SIGTERM raising Terminated in the run where the command asks for it,
    a bug of ours caught, logged loudly and never a node fault (a prolog exits 0, --node 3),
    and a reader of stdout that left (`--history | head`) ending the run quietly."""
    import importlib

    from .model import Mode

    name = Mode.NODE.value if mode == "repair" else command.name or mode.replace("_", "-")
    handles_sigterm = command.sigterm
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if handles_sigterm else None
    loaded: List["Config"] = []  # the config, once read, for logging a crash
    module: Any = None
    try:
        module = importlib.import_module(f"{__package__}.commands.{command.module}")
        if hasattr(module, "usage"):
            module.usage(args)  # the mode's own refusals, before the config is read
        config = _config(command.config, args.config)
        if isinstance(config, int):
            return config
        if config is not None and config.refused and command.stop_on_refused:
            from .config import refusal_line

            print(refusal_line(config.refused), flush=True)
            _log_refused(name, config)
            return exitcodes.CONFIG_ERROR
        if config is not None:
            loaded.append(config)
        code = int(module.main(args, config, started))
        sys.stdout.flush()
        return code
    except UsageError:
        raise  # `--gpus 9` on a 4-GPU node: found only once NVML has answered
    except BrokenPipeError:
        # `--history 200 --json | head -1`: the reader has what it wanted
        _stdout_to_devnull()
        return exitcodes.done_exit(True)
    except Terminated:
        print(f"gpu-healthcheck: {name}: terminated by SIGTERM (PrologEpilogTimeout?); "
              f"probe children were killed", file=sys.stderr)
        try:
            from .act.sinks import emit_terminated

            emit_terminated(name, loaded[0] if loaded else None, os.environ)
        except Exception:  # noqa: BLE001 - we are being stopped: nothing more to do
            pass
        return exitcodes.TERMINATED
    except Exception as exc:  # noqa: BLE001 - the one place our own bugs are caught
        if not command.crash:
            raise
        if module is not None and hasattr(module, "crashed"):
            return int(module.crashed(exc))
        import traceback

        what = (f"a Python dependency is missing or broken ({exc}): reinstall gpu-healthcheck"
                if isinstance(exc, ImportError) else "a bug in gpu-healthcheck")
        print(f"gpu-healthcheck: INTERNAL ERROR in {name} ({what}; not a node fault; no "
              f"action taken, the job is not failed):\n{traceback.format_exc()}", file=sys.stderr)
        _log_internal_error(name, loaded[0] if loaded else None)
        return exitcodes.internal_error_exit(Mode(name))
    finally:
        if handles_sigterm:
            signal.signal(signal.SIGTERM, previous)


def _config(policy: str, cli_path: Optional[str]) -> Union["Config", int, None]:
    """The one config-error mapping: the config (None where the command reads its own), or the
    exit status of a config error (EXIT)."""
    if policy == OWN:
        return None
    from .config import Config, ConfigError

    try:
        config = _load_config(None if policy == QUIET else cli_path)
    except ConfigError as exc:
        if policy == DEFAULTS:
            return Config(warnings=(f"config error: {exc}; running with built-in defaults",))
        if policy == QUIET:
            return Config()
        print(f"gpu-healthcheck: config error: {exc}", file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    if policy != QUIET:  # a job's user (--job-report) is not the one to rename the admin's keys
        for line in config.deprecated:
            print(f"gpu-healthcheck: config warning: {line}", file=sys.stderr)
    return config


def _load_config(cli_path: Optional[str]) -> "Config":
    """The config file (--config, $GPU_HEALTHCHECK_CONFIG or the default), its [checks]
    disabled ids checked against the catalogue.  Raises ConfigError."""
    from .checks import CATALOGUE
    from .config import load_config

    return load_config(cli_path, os.environ, known_checks=CATALOGUE)


def _stdout_to_devnull() -> None:
    """After EPIPE: point stdout at /dev/null so the interpreter's final flush stays quiet."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class _ReaderMayLeave:
    """stdout or stderr of the process, whose reader may leave (`--check-config | head -3`).

    On EPIPE the stream's descriptor is pointed at /dev/null and the write is made again, so
    the command runs on to its end and exits with the status it would have had: EPIPE changes
    nothing but where the rest of the output goes (a prolog's status decides a job's fate, a
    --check-config's whether a config is valid).  Every other attribute is the stream's own."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def _reader_left(self) -> None:
        os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._reader_left()
            return self._stream.write(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_left()
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _log_refused(mode: str, config: "Config") -> None:
    """The refusal in the journal (critical), for a mode that stopped at it."""
    if not config.journal:
        return
    from .act.journal import send_events
    from .model import CRIT, LogEvent

    send_events([LogEvent("error", CRIT, w, {"GPU_HEALTHCHECK_MODE": mode}) for w in config.warnings], mode)


def _log_internal_error(mode: str, config: Optional["Config"]) -> None:
    try:
        import traceback

        from .act.sinks import emit_internal_error

        emit_internal_error(mode, traceback.format_exc(), config=config)
    except Exception:  # noqa: BLE001 - logging the bug must not become a second bug
        pass


def entry(argv: Optional[Sequence[str]] = None) -> NoReturn:
    """The process's entry point: the console script, /usr/bin/gpu-healthcheck, `python3 -m
    healthcheck.cli`, and (through entrypoints) the Slurm scripts.  main() is the same run for a
    caller in the same process: it returns its exit code instead."""
    # A run lives for well under a minute and leaves little cyclic garbage; the collector's
    # passes over the objects that importing creates cost ~3 ms of every job start.
    started = time.monotonic()
    gc.disable()
    # A reader that leaves early is quiet for every command (none prints a traceback for it);
    # a stream closed at start (`>&-`) is None and stays so.
    if sys.stdout is not None:
        sys.stdout = _ReaderMayLeave(sys.stdout)  # type: ignore[assignment]
    if sys.stderr is not None:
        sys.stderr = _ReaderMayLeave(sys.stderr)  # type: ignore[assignment]
    leave(main(argv, started))


def leave(code: int) -> NoReturn:
    """End the process now with `code`, skipping the interpreter's teardown.

    Tearing down the modules and their objects cost ~9 ms of every ~65 ms prolog, and none of it
    is work: every file is closed where it is written (and fsynced where it must survive a
    crash), journal entries go out on a datagram socket as they are made, and no non-daemon
    thread exists (an NVML reader abandoned on a hung GPU is a daemon, which a teardown would
    not wait for either).  What an orderly exit does that matters is done here: atexit handlers
    run, then stdout and stderr are flushed.  A reader that left (EPIPE) or a full disk under a
    redirected stdout does not change the exit status: the verdict stands, and a prolog's status
    decides a job's fate.
    """
    atexit._run_exitfuncs()  # first: a handler may still write
    for stream in (sys.stdout, sys.stderr):
        if stream is None:  # closed when we started (`>&-`): nothing was written to it
            continue
        try:
            stream.flush()
        except (OSError, ValueError):  # ValueError: closed
            pass
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    entry()
