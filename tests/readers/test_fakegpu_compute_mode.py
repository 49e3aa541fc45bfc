"""The fake libcuda's compute modes and other processes' memory, as the real driver has them
(issue 22, item 7): a second process's context on an EXCLUSIVE_PROCESS GPU gets
CUDA_ERROR_DEVICE_UNAVAILABLE (46), and memory that the scenario's processes hold is gone from
this process's free memory, so an allocation larger than what is left fails OUT_OF_MEMORY."""

from tests.readers.test_fakegpu import built, run  # noqa: F401 - the session fixture builds the fake

MEMINFO = """
cu().cuInit(0)
res = []
for i in range(3):
    r = ctx(i)
    free, total = c_size_t(), c_size_t()
    cu().cuMemGetInfo_v2(byref(free), byref(total))
    res.append([r, free.value >> 20, total.value >> 20, alloc(2 << 30)[0] if r == 0 else None])
out(res)
"""


def test_fakegpu_exclusive_process_refuses_a_second_process_context(tmp_path):
    scn = ("gpus = 3\ngpu.*.compute_mode = exclusive_process\ngpu.0.processes = 4242:1000\n"
           "gpu.2.compute_mode = prohibited\n")
    r, _ = run(tmp_path, scn, MEMINFO)
    # GPU 0: another process holds its one context; GPU 1: nobody does; GPU 2: prohibited
    assert [x[0] for x in r] == [46, 0, 46]


def test_fakegpu_exclusive_process_lets_the_process_listed_there_in(tmp_path):
    scn = "gpus = 1\ngpu.0.compute_mode = exclusive_process\ngpu.0.processes = {pid}:1000\n"
    prog = "import os\nopen(os.environ['SCN'], 'w').write(os.environ['TEXT'].format(pid=os.getpid()))\n" + MEMINFO.replace("range(3)", "range(1)")
    path = tmp_path / "scenario"
    r, _ = run(tmp_path, None, prog, env={"FAKEGPU_SCENARIO": str(path), "SCN": str(path), "TEXT": scn})
    assert r[0][0] == 0


def test_fakegpu_processes_hold_their_memory(tmp_path):
    # GPU 0: a co-tenant holds 79 GiB of 80 (memory.used_mib left at its default of 4 MiB);
    # GPU 1: used_mib says more than the processes hold, and used_mib counts
    scn = ("gpus = 3\ngpu.*.memory.total_mib = 81920\ngpu.0.processes = 4242:80896\n"
           "gpu.1.processes = 4242:1024\ngpu.1.memory.used_mib = 81000\n")
    r, _ = run(tmp_path, scn, MEMINFO)
    assert r[0][:3] == [0, 1024, 81920] and r[0][3] == 2  # 2 GiB > 1 GiB free: OUT_OF_MEMORY
    assert r[1][:3] == [0, 920, 81920] and r[1][3] == 2
    assert r[2][:3] == [0, 81916, 81920] and r[2][3] == 0
