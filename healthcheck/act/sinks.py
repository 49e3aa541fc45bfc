"""Where a run's log events go: stderr (slurmd's log), journald, the history file, metrics.

    emit(outcome, config, Mode.PROLOG)              # once per run, after the report
    emit_internal_error("prolog", traceback_text)   # when our own code crashed

- stderr: by hand (--node) only CRIT, since the table already shows the findings; from
  prolog/epilog everything at NOTICE or worse, which lands in slurmd's log.
- journald: every event (journal.py).  Where the journal is unavailable (no socket, no
  systemd-python, a send failing) every event goes to stderr instead, with its key fields, so
  nothing is lost silently.  `journal = false` in the config turns journald off; the history
  file still keeps every run.
- history: always (history.py).
- metrics: when metrics_file is set (metrics.py).
- dcgm-exporter's job mapping: prolog and epilog, when hpc_job_mapping_dir is set (jobmap.py);
  first, so that what it did is in the journal and the history line.

A sink that fails never raises out of here and never changes the exit code, which slurmd acts
on: it costs one line on stderr naming the sink and its path.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Callable, List, Mapping, Optional, Set, TextIO

if TYPE_CHECKING:
    from ..config import Config
    from ..model import Mode
    from ..model import LogEvent, RunOutcome

_LEVEL = {0: "EMERGENCY", 1: "ALERT", 2: "CRITICAL", 3: "ERROR", 4: "WARNING", 5: "NOTICE",
          6: "INFO", 7: "DEBUG"}
# The fields an admin needs to find the board and the job again from slurmd's log alone.
_KEY_FIELDS = ("GPU_HEALTHCHECK_CHECK", "GPU_HEALTHCHECK_SEVERITY", "GPU_HEALTHCHECK_VALUE",
               "GPU_INDEX", "GPU_PCI_BUS_ID", "GPU_SERIAL", "GPU_UUID", "SLURM_JOB_ID",
               "SLURMD_NODENAME")


def _line(event: "LogEvent", with_fields: bool) -> str:
    text = f"gpu-healthcheck: {_LEVEL.get(event.priority, 'INFO')}: {event.message}"
    if with_fields:
        keys = [f"{k}={event.fields[k]}" for k in _KEY_FIELDS if event.fields.get(k)]
        text += f" [{event.kind}{' ' if keys else ''}{' '.join(keys)}]"
    return text


def emit(outcome: "RunOutcome", config: "Config", mode: "Mode", err: Optional[TextIO] = None) -> None:
    """Send the run's events to every sink; never raises."""
    from ..model import Mode

    err = err if err is not None else sys.stderr
    mode_name = getattr(mode, "value", str(mode))
    if config.hpc_job_mapping_dir and mode in (Mode.PROLOG, Mode.EPILOG):
        try:  # first, so that its line reaches the journal and the history with the run's
            from .jobmap import job_map_events

            outcome.events.extend(job_map_events(config, outcome, mode))
        except Exception as exc:  # noqa: BLE001 - a sink must not change slurmd's exit code
            print(f"gpu-healthcheck: hpc job map sink failed: {config.hpc_job_mapping_dir}: {exc}", file=err)
    limit = 2 if mode is Mode.NODE else 5
    fallback: Set[int] = set()
    if config.journal:
        try:
            from .journal import send_events

            from .history import RECORDED

            result = send_events([e for e in outcome.events if not e.fields.get(RECORDED)], mode_name)
            if result.problem:
                print(f"gpu-healthcheck: journal sink: {result.problem}; events go to stderr and "
                      f"the history file {config.history_path()}", file=err)
                fallback = {id(e) for e in result.unsent}
        except Exception as exc:  # noqa: BLE001 - a sink must not change slurmd's exit code
            print(f"gpu-healthcheck: journal sink failed ({type(exc).__name__}: {exc}); events go "
                  f"to stderr", file=err)
            fallback = {id(e) for e in outcome.events}
    try:
        for event in outcome.events:
            # By hand the history file keeps every event and the table shows the findings, so
            # the fallback repeats on stderr only what needs attention (warning or worse).
            fall_back = id(event) in fallback and (mode is not Mode.NODE or event.priority <= 4)
            if event.priority <= limit or fall_back:
                print(_line(event, fall_back), file=err)
    except (OSError, ValueError):
        pass  # stderr closed: there is nowhere left to say so

    _guarded(err, "history", config.history_path(), lambda: _run_history(config, outcome))
    if config.metrics_file or config.refused:  # a refusal goes to the last trusted textfile
        from .metrics import write_metrics

        _guarded(err, "metrics", config.metrics_file or "the last trusted metrics textfile",
                 lambda: write_metrics(config, outcome, mode_name))


def _run_history(config: "Config", outcome: "RunOutcome") -> List[str]:
    from .history import append_run

    append_run(config, outcome)
    return []


def _guarded(err: TextIO, sink: str, where: str, call: Callable[[], List[str]]) -> None:
    """Run one sink: its notes and its failure each cost one stderr line naming the sink and
    the path, never an exception and never the exit code, which slurmd acts on."""
    try:
        for note in call():
            print(f"gpu-healthcheck: {sink} sink: {note}", file=err)
    except Exception as exc:  # noqa: BLE001 - a sink must not change slurmd's exit code
        print(f"gpu-healthcheck: {sink} sink failed: {where}: "
              f"{getattr(exc, 'strerror', None) or exc}", file=err)


def _last_word(mode: str, config: "Config", event: "LogEvent", history: Callable[[], object],
               err: TextIO) -> None:
    """One CRIT journal entry and one history line for a run that ended without a verdict."""
    if config.journal:
        from .journal import send_events

        _guarded(err, "journal", "journald",
                 lambda: [p for p in (send_events([event], mode).problem,) if p])

    def write() -> List[str]:
        history()
        return []

    _guarded(err, "history", config.history_path(), write)


def record_now(config: "Config", event: "LogEvent", mode: str, node: Optional[str],
               err: Optional[TextIO] = None) -> "LogEvent":
    """Write one event to the journal and the history now, before what may outlast the run
    (the RMA decision, before its evidence is gathered); never raises.  Returns the event as
    the run keeps it: marked, so the run's own journal entries and history line do not repeat
    it (its metrics still count it)."""
    from .history import RECORDED, append_event

    _last_word(mode, config, event, lambda: append_event(config, mode, event, node), err or sys.stderr)
    return event._replace(fields={**event.fields, RECORDED: "1"})


def emit_internal_error(mode: str, trace: str, config: Optional["Config"] = None,
                        err: Optional[TextIO] = None) -> None:
    """Our own code failed (stderr already has the traceback): a CRIT journal entry with the
    internal-error MESSAGE_ID and a history line, best effort; never raises."""
    from .history import append_internal_error
    from .journal import INTERNAL_ERROR
    from ..model import CRIT, LogEvent

    cfg = config if config is not None else _config_for_crash()
    message = (f"gpu-healthcheck: INTERNAL ERROR in {mode} (a bug in gpu-healthcheck, not a node "
               f"fault; no action taken)\n{trace}")
    _last_word(mode, cfg, LogEvent(INTERNAL_ERROR, CRIT, message, {"GPU_HEALTHCHECK_MODE": mode}),
               lambda: append_internal_error(cfg, mode, trace), err or sys.stderr)


def emit_terminated(mode: str, config: Optional["Config"], environ: Mapping[str, str],
                    err: Optional[TextIO] = None) -> None:
    """SIGTERM (slurmd's PrologEpilogTimeout) stopped the run before it decided: one CRIT
    journal entry and one history line, so the timeout is findable per node and job."""
    from .history import append_terminated
    from ..model import CRIT, LogEvent

    cfg = config if config is not None else _config_for_crash()
    node = cfg.node_name or environ.get("SLURMD_NODENAME")
    job_id = environ.get("SLURM_JOB_ID")
    message = (f"{mode} terminated by SIGTERM before it decided (PrologEpilogTimeout?); probe "
               f"children killed, no action taken")
    fields = {"GPU_HEALTHCHECK_MODE": mode, "SLURMD_NODENAME": node or "", "SLURM_JOB_ID": job_id or ""}
    _last_word(mode, cfg, LogEvent("error", CRIT, message, fields),
               lambda: append_terminated(cfg, mode, message, node, job_id), err or sys.stderr)


def _config_for_crash() -> "Config":
    """cli does not hand us its config on a crash: read it again, or fall back to defaults."""
    import os

    from ..config import Config, load_config

    try:
        return load_config(None, os.environ)
    except Exception:  # noqa: BLE001 - the crash may have been in the config code itself
        return Config()
