"""healthcheck/checks/deepshared.py, pure: what the deep level may conclude on a GPU that live
co-tenants share."""

from healthcheck.deepmodel import DeepGpu, DeepRun
from healthcheck.model import Action, GpuProcess, Severity
from tests.lib.snapshots import HEALTHY, NODE, _DEEP_OK, found


def test_a_gpu_with_live_co_tenants_is_unknown_never_a_fail():
    """gres/shard: another live job's process holds 2 GiB of GPU 0; the same wrong answers and
    stuck word that fail an idle GPU say unknown there, with no action."""
    tenant = GpuProcess(777, 2048, "bob", "python serve.py", job_id="55", job_live=True, job_gpus=(0,))
    gpu = HEALTHY._replace(processes=(tenant,))
    node = NODE._replace(gpus=(gpu,), shared_gres=("shard",),
                         deep=DeepRun(gpus=(DeepGpu(0, "ok", **{**_DEEP_OK, "wrong_elements": 3,
                                                                "wrong_most": 3, "wrong_launches": 1,
                                                                "launches": 9, "mem_errors": 1,
                                                                "mem_pass": "random data"}),)))
    deep = [f for f in found(node) if f.check.startswith("deep.") and f.severity is not Severity.INFO]
    assert {f.check for f in deep} == {"deep.compute_wrong", "deep.memory"}
    assert all(f.severity is Severity.UNKNOWN and f.action is Action.NONE for f in deep)
    assert all("live co-tenants hold 2,048 MiB" in f.message for f in deep)
