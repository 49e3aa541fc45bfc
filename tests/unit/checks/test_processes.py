"""healthcheck/checks/processes.py, pure: memory held without a visible process (a leak, or a GPU
busy elsewhere) and leftover processes, on snapshot records."""

from healthcheck.checks import CheckContext, run_checks
from healthcheck.config import Config
from healthcheck.model import Action, GpuProcess, Mode, Severity
from tests.lib.snapshots import catalogue_cases, faulty


# test_<stem>_healthy_snapshot_passes and test_<stem>_fault_is_found_with_severity_and_action for
# each check of the module, on its case in tests/lib/snapshots.FAULTS
globals().update(catalogue_cases("processes"))


def test_processes_leftover_count_only_on_the_jobs_gpus():
    node = faulty(dict(gpu=dict(processes=(GpuProcess(1, 10),))))
    found, _ = run_checks(node, CheckContext(Config(), Mode.PROLOG, selected=()))
    assert not [f for f in found if f.check == "processes.leftover"]


def test_memory_leaked_without_a_visible_process_leak_or_busy():
    from healthcheck.checks.processes import busy_signs
    held = dict(memory_used_mib=9216, processes=())
    busy = faulty(dict(gpu=dict(held, utilization_gpu_pct=65, pstate=2)))
    idle = faulty(dict(gpu=dict(held, utilization_gpu_pct=0, pstate=0)))
    unknown_util = faulty(dict(gpu=dict(held, utilization_gpu_pct=None, pstate=2)))
    for mode, severity in ((Mode.PROLOG, Severity.FAIL), (Mode.NODE, Severity.WARN), (Mode.EPILOG, Severity.WARN)):
        ctx = CheckContext(Config(), mode)
        [b] = [f for f in run_checks(busy, ctx)[0] if f.check == "memory.leaked"]
        [i] = [f for f in run_checks(idle, ctx)[0] if f.check == "memory.leaked"]
        assert b.severity is severity and i.severity is severity
        assert b.action is (Action.DRAIN if severity is Severity.FAIL else Action.NONE)
        assert i.action is (Action.RESET if severity is Severity.FAIL else Action.NONE)
        assert "not visible from here" in b.message and "reset the GPU" not in b.message
        assert "reset the GPU" in i.message
    assert busy_signs(unknown_util.gpus[0]) == ["performance state P2 with utilization unknown"]
    assert busy_signs(idle.gpus[0]) == []
