"""Tests of the fakegpu test instrument (tests/fakegpu/).

Every probe runs in a subprocess with LD_LIBRARY_PATH=tests/fakegpu/build and
FAKEGPU_SCENARIO=<file>, because pynvml (and ctypes) keep the library loaded
for the life of a process.  The real pynvml is used, exactly as the checker
uses it; CUDA is driven through ctypes like the checker's allocation probe.

The libraries are built by `make -C tests/fakegpu`; the session fixture runs
it only when the build is missing or older than its sources.
"""
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.lib.fakenode import build_lock

HERE = Path(__file__).resolve().parents[1]  # tests/
FAKEGPU = HERE / "fakegpu"
BUILD = FAKEGPU / "build"
FIXTURES = HERE / "fixtures" / "nvidia-smi-xml"
DUMPS = sorted(FIXTURES.glob("*.xml"))
SOURCES = sorted(p.name for p in FAKEGPU.glob("*.[ch]")) + ["Makefile", "find_nvml_header.py"]
LIBS = ["libnvidia-ml.so.1", "libcuda.so.1"]

sys.path.insert(0, str(FAKEGPU))
import from_nvidia_smi  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def built():
    newest = max((FAKEGPU / s).stat().st_mtime for s in SOURCES)
    libs = [BUILD / lib for lib in LIBS]
    with build_lock():  # another pytest-xdist worker may be building them
        if not all(p.exists() and p.stat().st_mtime >= newest for p in libs):
            proc = subprocess.run(["make", "-C", str(FAKEGPU), "PYTHON=" + sys.executable],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                pytest.fail("make -C tests/fakegpu failed:\n" + proc.stdout + proc.stderr, pytrace=False)
    return BUILD


# ------------------------------------------------------------ child helpers

PRELUDE = r'''
import ctypes, json, os, sys, time, threading
from ctypes import byref, c_int, c_uint, c_size_t, c_uint64, c_void_p, c_char_p, POINTER
import pynvml as N

def out(x):
    sys.stdout.write("RESULT " + json.dumps(x) + "\n")

def E(f, *a, **k):
    """Call an NVML wrapper; an NVMLError becomes its class name."""
    try:
        return f(*a, **k)
    except N.NVMLError as e:
        return type(e).__name__

def s(x):
    return x.decode() if isinstance(x, bytes) else x

_cu = None
def cu():
    global _cu
    if _cu is None:
        _cu = ctypes.CDLL("libcuda.so.1")
        _cu.cuMemAlloc_v2.argtypes = [POINTER(c_uint64), c_size_t]
        _cu.cuMemFree_v2.argtypes = [c_uint64]
        _cu.cuMemsetD32_v2.argtypes = [c_uint64, c_uint, c_size_t]
        _cu.cuMemsetD8_v2.argtypes = [c_uint64, ctypes.c_ubyte, c_size_t]
        _cu.cuMemcpyHtoD_v2.argtypes = [c_uint64, c_void_p, c_size_t]
        _cu.cuMemcpyDtoH_v2.argtypes = [c_void_p, c_uint64, c_size_t]
        _cu.cuMemGetInfo_v2.argtypes = [POINTER(c_size_t), POINTER(c_size_t)]
        _cu.cuDeviceTotalMem_v2.argtypes = [POINTER(c_size_t), c_int]
        _cu.cuCtxSetCurrent.argtypes = [c_void_p]
        _cu.cuGetErrorName.argtypes = [c_int, POINTER(c_char_p)]
        _cu.cuGetErrorString.argtypes = [c_int, POINTER(c_char_p)]
    return _cu

def ctx(ordinal):
    """cuDeviceGet + cuDevicePrimaryCtxRetain + cuCtxSetCurrent: 0 or the error."""
    dev = c_int()
    r = cu().cuDeviceGet(byref(dev), ordinal)
    if r:
        return r
    c = c_void_p()
    r = cu().cuDevicePrimaryCtxRetain(byref(c), dev)
    if r:
        return r
    return cu().cuCtxSetCurrent(c)

def alloc(n):
    p = c_uint64()
    r = cu().cuMemAlloc_v2(byref(p), n)
    return r, p.value

def dtoh(p, n):
    buf = ctypes.create_string_buffer(n)
    r = cu().cuMemcpyDtoH_v2(buf, p, n)
    return r, buf.raw

def err_name(code):
    p = c_char_p()
    r = cu().cuGetErrorName(code, byref(p))
    return r, s(p.value) if p.value else None
'''


def run(tmp_path, scenario, code, env=None, timeout=60, check=True):
    """Run `code` (after PRELUDE) in a child against the fake libraries.

    `scenario` is text written to a file (None: FAKEGPU_SCENARIO unset).
    Returns (result, proc): result is the value passed to out(), or None.
    """
    child_env = dict(os.environ)
    child_env["LD_LIBRARY_PATH"] = str(BUILD)
    child_env.pop("CUDA_VISIBLE_DEVICES", None)
    child_env.pop("FAKEGPU_SCENARIO", None)
    if scenario is not None:
        path = tmp_path / "scenario"
        path.write_text(textwrap.dedent(scenario))
        child_env["FAKEGPU_SCENARIO"] = str(path)
    child_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code)],
        env=child_env, capture_output=True, text=True, timeout=timeout,
    )
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
    if check:
        assert proc.returncode == 0, proc.stderr
    return result, proc


# Reads back, through the real pynvml, every per-GPU value for GPU i.
READ_GPU = r'''
def read_gpu(i):
    h = N.nvmlDeviceGetHandleByIndex(i)
    pci = E(N.nvmlDeviceGetPciInfo, h)
    fv = E(N.nvmlDeviceGetFieldValues, h, [
        N.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, N.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
        N.NVML_FI_DEV_ECC_SBE_AGG_TOTAL, N.NVML_FI_DEV_ECC_DBE_AGG_TOTAL,
        N.NVML_FI_DEV_RETIRED_SBE, N.NVML_FI_DEV_RETIRED_DBE, N.NVML_FI_DEV_RETIRED_PENDING,
        N.NVML_FI_DEV_REMAPPED_COR, N.NVML_FI_DEV_REMAPPED_UNC,
        N.NVML_FI_DEV_REMAPPED_PENDING, N.NVML_FI_DEV_REMAPPED_FAILURE,
        N.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, 9999])
    if not isinstance(fv, str):
        fv = [[v.fieldId, v.nvmlReturn, v.value.ullVal] for v in fv]
    def ecc(t, c):
        return E(N.nvmlDeviceGetTotalEccErrors, h, t, c)
    U, C = N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_MEMORY_ERROR_TYPE_CORRECTED
    V, A = N.NVML_VOLATILE_ECC, N.NVML_AGGREGATE_ECC
    mem1 = E(N.nvmlDeviceGetMemoryInfo, h)
    mem2 = E(N.nvmlDeviceGetMemoryInfo, h, version=N.nvmlMemory_v2)
    procs = E(N.nvmlDeviceGetComputeRunningProcesses, h)
    gprocs = E(N.nvmlDeviceGetGraphicsRunningProcesses, h)
    retired = {}
    for cause in (0, 1):
        r = E(N.nvmlDeviceGetRetiredPages_v2, h, cause)
        retired[cause] = r if isinstance(r, str) else len(r)
    return {
        "name": s(E(N.nvmlDeviceGetName, h)),
        "uuid": s(E(N.nvmlDeviceGetUUID, h)),
        "serial": s(E(N.nvmlDeviceGetSerial, h)),
        "busId": s(pci.busId) if not isinstance(pci, str) else pci,
        "busIdLegacy": s(pci.busIdLegacy) if not isinstance(pci, str) else pci,
        "pciDeviceId": pci.pciDeviceId if not isinstance(pci, str) else pci,
        "pciSubSystemId": pci.pciSubSystemId if not isinstance(pci, str) else pci,
        "index": E(N.nvmlDeviceGetIndex, h),
        "minor": E(N.nvmlDeviceGetMinorNumber, h),
        "ecc_mode": E(N.nvmlDeviceGetEccMode, h),
        "ecc": [ecc(C, V), ecc(U, V), ecc(C, A), ecc(U, A)],
        "ecc_dram": [E(N.nvmlDeviceGetMemoryErrorCounter, h, U, V, N.NVML_MEMORY_LOCATION_DRAM),
                     E(N.nvmlDeviceGetMemoryErrorCounter, h, U, V, N.NVML_MEMORY_LOCATION_SRAM)],
        "retired": [retired[0], retired[1], E(N.nvmlDeviceGetRetiredPagesPendingStatus, h)],
        "remap": E(N.nvmlDeviceGetRemappedRows, h),
        "fields": fv,
        "mem1": mem1 if isinstance(mem1, str) else [mem1.total, mem1.free, mem1.used],
        "mem2": mem2 if isinstance(mem2, str) else [mem2.total, mem2.reserved, mem2.free, mem2.used],
        "procs": procs if isinstance(procs, str) else [[p.pid, p.usedGpuMemory] for p in procs],
        "gprocs": gprocs if isinstance(gprocs, str) else [[p.pid, p.usedGpuMemory] for p in gprocs],
        "temp": E(N.nvmlDeviceGetTemperature, h, N.NVML_TEMPERATURE_GPU),
        "thresholds": [E(N.nvmlDeviceGetTemperatureThreshold, h, t) for t in (
            N.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, N.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
            N.NVML_TEMPERATURE_THRESHOLD_GPU_MAX)],
        "power": E(N.nvmlDeviceGetPowerUsage, h),
        "clocks": [E(N.nvmlDeviceGetCurrentClocksEventReasons, h),
                   E(N.nvmlDeviceGetCurrentClocksThrottleReasons, h)],
        "pcie": [E(N.nvmlDeviceGetCurrPcieLinkGeneration, h), E(N.nvmlDeviceGetMaxPcieLinkGeneration, h),
                 E(N.nvmlDeviceGetCurrPcieLinkWidth, h), E(N.nvmlDeviceGetMaxPcieLinkWidth, h)],
        "persistence": E(N.nvmlDeviceGetPersistenceMode, h),
        "mig": E(N.nvmlDeviceGetMigMode, h),
        "arch": E(N.nvmlDeviceGetArchitecture, h),
        "cc": E(N.nvmlDeviceGetCudaComputeCapability, h),
        "brand": E(N.nvmlDeviceGetBrand, h),
        "display": [E(N.nvmlDeviceGetDisplayMode, h), E(N.nvmlDeviceGetDisplayActive, h)],
    }
'''

MIB = 1024 * 1024


def read_gpus(tmp_path, scenario, indices, env=None):
    code = READ_GPU + "N.nvmlInit()\nout({i: read_gpu(i) for i in %r})\n" % (list(indices),)
    result, _ = run(tmp_path, scenario, code, env=env)
    return {int(k): v for k, v in result.items()}


def fields(g):
    return {f[0]: (f[1], f[2]) for f in g["fields"]}


# ---------------------------------------------------------------- the build

def test_build_exports_every_symbol():
    nvml = ctypes.CDLL(str(BUILD / "libnvidia-ml.so.1"))
    cuda = ctypes.CDLL(str(BUILD / "libcuda.so.1"))
    for name in """nvmlInitWithFlags nvmlInit_v2 nvmlInit nvmlShutdown nvmlErrorString
        nvmlSystemGetDriverVersion nvmlSystemGetNVMLVersion nvmlSystemGetCudaDriverVersion
        nvmlSystemGetCudaDriverVersion_v2 nvmlDeviceGetCount_v2 nvmlDeviceGetCount
        nvmlDeviceGetHandleByIndex_v2 nvmlDeviceGetHandleByIndex nvmlDeviceGetHandleByUUID
        nvmlDeviceGetHandleByPciBusId_v2 nvmlDeviceGetName nvmlDeviceGetUUID nvmlDeviceGetSerial
        nvmlDeviceGetPciInfo_v3 nvmlDeviceGetPciInfo_v2 nvmlDeviceGetPciInfo nvmlDeviceGetIndex
        nvmlDeviceGetMinorNumber nvmlDeviceGetEccMode nvmlDeviceGetTotalEccErrors
        nvmlDeviceGetMemoryErrorCounter nvmlDeviceGetRetiredPages nvmlDeviceGetRetiredPages_v2
        nvmlDeviceGetRetiredPagesPendingStatus nvmlDeviceGetRemappedRows nvmlDeviceGetMemoryInfo
        nvmlDeviceGetMemoryInfo_v2 nvmlDeviceGetComputeRunningProcesses_v3
        nvmlDeviceGetComputeRunningProcesses_v2 nvmlDeviceGetComputeRunningProcesses
        nvmlDeviceGetGraphicsRunningProcesses_v3 nvmlDeviceGetTemperature
        nvmlDeviceGetTemperatureThreshold nvmlDeviceGetPowerUsage
        nvmlDeviceGetCurrentClocksEventReasons nvmlDeviceGetCurrentClocksThrottleReasons
        nvmlDeviceGetCurrPcieLinkGeneration nvmlDeviceGetCurrPcieLinkWidth
        nvmlDeviceGetMaxPcieLinkGeneration nvmlDeviceGetMaxPcieLinkWidth
        nvmlDeviceGetPersistenceMode nvmlDeviceGetMigMode nvmlDeviceGetFieldValues
        nvmlDeviceGetArchitecture nvmlDeviceGetCudaComputeCapability nvmlDeviceGetBrand
        nvmlDeviceGetDisplayMode nvmlDeviceGetDisplayActive""".split():
        assert hasattr(nvml, name), name
    for name in """cuInit cuDriverGetVersion cuDeviceGetCount cuDeviceGet cuDeviceGetName
        cuDeviceGetPCIBusId cuDeviceGetUuid cuDeviceGetUuid_v2 cuDeviceTotalMem_v2
        cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRelease cuDevicePrimaryCtxRelease_v2
        cuCtxSetCurrent cuCtxGetCurrent cuCtxSynchronize cuMemGetInfo_v2 cuMemAlloc_v2
        cuMemFree_v2 cuMemsetD32_v2 cuMemsetD8_v2 cuMemcpyHtoD_v2 cuMemcpyDtoH_v2
        cuGetErrorName cuGetErrorString""".split():
        assert hasattr(cuda, name), name
    # The shared scenario parser is private to each library.
    assert not hasattr(nvml, "fg_scenario_load")
    assert not hasattr(cuda, "fg_scenario_load")


def test_makefile_reports_missing_header(tmp_path):
    proc = subprocess.run(
        ["make", "-C", str(FAKEGPU), "BUILD=" + str(tmp_path / "b"), "NVML_HEADER="],
        capture_output=True, text=True,
    )
    assert proc.returncode != 0
    assert "nvml.h not found: pip install nvidia-nvml-dev" in proc.stderr


# ------------------------------------------------------------- defaults

def test_defaults_without_scenario(tmp_path):
    code = READ_GPU + """
N.nvmlInit()
out({"count": N.nvmlDeviceGetCount(), "driver": s(N.nvmlSystemGetDriverVersion()),
     "nvml": s(N.nvmlSystemGetNVMLVersion()), "cuda": N.nvmlSystemGetCudaDriverVersion(),
     "cuda2": N.nvmlSystemGetCudaDriverVersion_v2(),
     "g0": read_gpu(0), "g7": read_gpu(7)})
"""
    r, _ = run(tmp_path, None, code)
    assert r["count"] == 8
    assert r["driver"] == "550.54.15"
    assert r["nvml"] == "12.550.54.15"
    assert r["cuda"] == r["cuda2"] == 12040
    g = r["g0"]
    assert g["name"] == "NVIDIA H100 80GB HBM3"
    assert g["uuid"] == "GPU-fa4e0000-0000-4000-8000-000000000000"
    assert r["g7"]["uuid"] == "GPU-fa4e0000-0000-4000-8000-000000000007"
    assert g["serial"] == "1650522003800" and r["g7"]["serial"] == "1650522003807"
    assert g["busId"] == "00000000:18:00.0" and g["busIdLegacy"] == "0000:18:00.0"
    assert r["g7"]["busId"] == "00000000:88:00.0"
    assert g["pciDeviceId"] == 0x233010DE
    assert g["index"] == 0 and r["g7"]["index"] == 7
    assert g["minor"] == 0 and r["g7"]["minor"] == 7
    assert g["ecc_mode"] == [1, 1]
    assert g["ecc"] == [0, 0, 0, 0] and g["ecc_dram"] == [0, 0]
    assert g["retired"] == [0, 0, 0]
    assert g["remap"] == [0, 0, 0, 0]
    f = fields(g)
    assert all(f[k] == (0, 0) for k in f if k != 9999)
    assert f[9999][0] == 3  # NOT_SUPPORTED in that value only
    assert g["mem2"] == [81559 * MIB, 0, (81559 - 4) * MIB, 4 * MIB]
    assert g["mem1"] == [81559 * MIB, (81559 - 4) * MIB, 4 * MIB]
    assert g["procs"] == [] and g["gprocs"] == []
    assert g["temp"] == 34 and g["thresholds"] == [87, 92, 85]  # GPU_MAX has its own key
    assert g["power"] == 70000
    assert g["clocks"] == [0, 0]
    assert g["pcie"] == [5, 5, 16, 16]
    assert g["persistence"] == 1 and g["mig"] == [0, 0]
    assert g["arch"] == 9 and g["cc"] == [9, 0] and g["brand"] == 14 and g["display"] == [0, 0]


def test_every_default_uuid_serial_and_bus_is_unique(tmp_path):
    code = """
N.nvmlInit()
hs = [N.nvmlDeviceGetHandleByIndex(i) for i in range(N.nvmlDeviceGetCount())]
out([[s(N.nvmlDeviceGetUUID(h)), s(N.nvmlDeviceGetSerial(h)), s(N.nvmlDeviceGetPciInfo(h).busId),
      N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByPciBusId(N.nvmlDeviceGetPciInfo(h).busId)),
      N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByUUID(N.nvmlDeviceGetUUID(h)))] for h in hs])
"""
    r, _ = run(tmp_path, "gpus = 256\n", code)
    assert len(r) == 256
    for column in range(3):
        assert len({row[column] for row in r}) == 256
    assert [row[3] for row in r] == list(range(256))
    assert [row[4] for row in r] == list(range(256))


# ------------------------------------------------ every key, group by group

def test_system_keys(tmp_path):
    scenario = """
        gpus = 3
        driver_version = 535.104.05
        cuda_driver_version = 12020
    """
    code = """
N.nvmlInit()
out([N.nvmlDeviceGetCount(), s(N.nvmlSystemGetDriverVersion()), s(N.nvmlSystemGetNVMLVersion()),
     N.nvmlSystemGetCudaDriverVersion(), E(N.nvmlDeviceGetHandleByIndex, 3)])
"""
    r, _ = run(tmp_path, scenario, code)
    assert r == [3, "535.104.05", "12.535.104.05", 12020, "NVMLError_InvalidArgument"]


@pytest.mark.parametrize("code,name", [(9, "NVMLError_DriverNotLoaded"), (18, "NVMLError_LibRmVersionMismatch")])
def test_nvml_init_error(tmp_path, code, name):
    r, _ = run(tmp_path, "nvml.init_error = %d\n" % code,
               "out([E(N.nvmlInit), E(N.nvmlDeviceGetCount)])")
    assert r == [name, "NVMLError_Uninitialized"]


def test_identity_keys(tmp_path):
    scenario = """
        gpu.1.name = NVIDIA A100-SXM4-80GB
        gpu.1.uuid = GPU-513536b6-7d19-9063-b049-1e69664bb298
        gpu.1.serial = 1650522003820
        gpu.1.pci_bus_id = 0000:3b:00.0
        gpu.1.pci_device_id = 0x20B210DE
        gpu.1.pci_subsystem_id = 0x147F10DE
        gpu.1.minor_number = 6
    """
    g = read_gpus(tmp_path, scenario, [1])[1]
    assert g["name"] == "NVIDIA A100-SXM4-80GB"
    assert g["uuid"] == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert g["serial"] == "1650522003820"
    assert g["busId"] == "00000000:3B:00.0" and g["busIdLegacy"] == "0000:3B:00.0"
    assert g["pciDeviceId"] == 0x20B210DE and g["pciSubSystemId"] == 0x147F10DE
    assert g["minor"] == 6 and g["index"] == 1


def test_ecc_keys(tmp_path):
    scenario = """
        gpu.0.ecc.volatile.corrected = 11
        gpu.0.ecc.volatile.uncorrected = 3
        gpu.0.ecc.aggregate.corrected = 1200
        gpu.0.ecc.aggregate.uncorrected = 7
        gpu.1.ecc_mode = disabled
        gpu.1.ecc_mode_pending = enabled
        gpu.2.ecc_mode = unsupported
        gpu.3.ecc_mode_pending = disabled
    """
    g = read_gpus(tmp_path, scenario, [0, 1, 2, 3])
    assert g[0]["ecc_mode"] == [1, 1]
    assert g[0]["ecc"] == [11, 3, 1200, 7]
    assert g[0]["ecc_dram"] == [3, 0]
    f = fields(g[0])
    assert [f[k] for k in (3, 4, 5, 6)] == [(0, 11), (0, 3), (0, 1200), (0, 7)]
    assert g[1]["ecc_mode"] == [0, 1]
    assert g[1]["ecc"] == ["NVMLError_NotSupported"] * 4  # counters need ECC on
    assert fields(g[1])[4][0] == 3
    assert g[2]["ecc_mode"] == "NVMLError_NotSupported"
    assert g[2]["ecc"][0] == "NVMLError_NotSupported"
    assert g[3]["ecc_mode"] == [1, 0]


def test_retired_and_remap_keys(tmp_path):
    scenario = """
        gpu.0.retired.sbe = 2
        gpu.0.retired.dbe = 5
        gpu.0.retired.pending = 1
        gpu.0.remap.correctable = 4
        gpu.0.remap.uncorrectable = 1
        gpu.0.remap.pending = 1
        gpu.0.remap.failure = 1
        gpu.0.recovery_action = 2
        gpu.1.mig_mode = 1
    """
    g = read_gpus(tmp_path, scenario, [0, 1])
    assert g[0]["retired"] == [2, 5, 1]
    assert g[0]["remap"] == [4, 1, 1, 1]
    f = fields(g[0])
    assert [f[k] for k in (29, 30, 31)] == [(0, 2), (0, 5), (0, 1)]
    assert [f[k] for k in (142, 143, 144, 145)] == [(0, 4), (0, 1), (0, 1), (0, 1)]
    assert f[230] == (0, 2)
    # Remapped rows are not available on a MIG-enabled GPU (as in real NVML).
    assert g[1]["remap"] == "NVMLError_NotSupported"
    assert g[1]["mig"] == [1, 1]


def test_retired_pages_addresses_and_timestamps(tmp_path):
    code = """
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
v1 = N.nvmlDeviceGetRetiredPages(h, 1)
v2 = N.nvmlDeviceGetRetiredPages_v2(h, 1)
out([v1, v2, N.nvmlDeviceGetRetiredPages(h, 0), E(N.nvmlDeviceGetRetiredPages, h, 7)])
"""
    r, _ = run(tmp_path, "gpu.0.retired.dbe = 3\n", code)
    v1, v2, sbe, bad = r
    assert len(v1) == 3 and len(set(v1)) == 3
    assert [p["address"] for p in v2] == v1
    assert all(p["timestamp"] > 0 for p in v2)
    assert sbe == []
    assert bad == "NVMLError_InvalidArgument"


def test_memory_and_process_keys(tmp_path):
    scenario = """
        gpu.0.memory.total_mib = 40960
        gpu.0.memory.used_mib = 2048
        gpu.0.memory.reserved_mib = 512
        gpu.0.processes = 4242:1000, 4343:24
    """
    g = read_gpus(tmp_path, scenario, [0])[0]
    assert g["mem2"] == [40960 * MIB, 512 * MIB, (40960 - 512 - 2048) * MIB, 2048 * MIB]
    assert g["mem1"] == [40960 * MIB, (40960 - 2560) * MIB, 2560 * MIB]
    assert g["procs"] == [[4242, 1000 * MIB], [4343, 24 * MIB]]
    assert g["gprocs"] == []


def test_process_list_struct_versions(tmp_path):
    """_v3 and _v2 fill nvmlProcessInfo_v2_t; the plain symbol fills v1."""
    code = """
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
lib = N.nvmlLib
class V1(ctypes.Structure):
    _fields_ = [("pid", c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]
n = c_uint(0)
r0 = lib.nvmlDeviceGetComputeRunningProcesses(h, byref(n), None)
arr = (V1 * 4)()
n4 = c_uint(4)
r1 = lib.nvmlDeviceGetComputeRunningProcesses(h, byref(n4), arr)
v2 = N.nvmlDeviceGetComputeRunningProcesses_v2(h)
out([r0, n.value, r1, n4.value, [[a.pid, a.usedGpuMemory] for a in arr[:2]],
     [[p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId] for p in v2]])
"""
    r, _ = run(tmp_path, "gpu.0.processes = 7:1,8:2\n", code)
    assert r[0] == 7 and r[1] == 2  # INSUFFICIENT_SIZE with the count needed
    assert r[2] == 0 and r[3] == 2
    assert r[4] == [[7, MIB], [8, 2 * MIB]]
    assert r[5] == [[7, MIB, 0xFFFFFFFF, 0xFFFFFFFF], [8, 2 * MIB, 0xFFFFFFFF, 0xFFFFFFFF]]


def test_thermal_power_clock_pcie_mode_keys(tmp_path):
    scenario = """
        gpu.4.temperature_c = 91
        gpu.4.temperature.slowdown_c = 85
        gpu.4.temperature.shutdown_c = 95
        gpu.4.power_mw = 612345
        gpu.4.clocks_event_reasons = 0x48
        gpu.4.pcie.gen_current = 3
        gpu.4.pcie.gen_max = 4
        gpu.4.pcie.width_current = 8
        gpu.4.pcie.width_max = 16
        gpu.4.persistence_mode = 0
        gpu.4.mig_mode = 1
    """
    g = read_gpus(tmp_path, scenario, [4])[4]
    assert g["temp"] == 91 and g["thresholds"] == [85, 95, 85]
    assert g["power"] == 612345
    assert g["clocks"] == [0x48, 0x48]
    assert g["pcie"] == [3, 4, 8, 16]
    assert g["persistence"] == 0 and g["mig"] == [1, 1]


def test_wildcard_and_later_line_wins(tmp_path):
    scenario = """
        gpus = 4
        gpu.*.temperature_c = 50
        gpu.2.temperature_c = 60      # specific after wildcard: wins
        gpu.1.temperature_c = 70
        gpu.*.power_mw = 100000       # wildcard after specific: wins
        gpu.1.power_mw = 1            # ...until this line
        gpu.*.name = Fake GPU
        gpu.*.name = Fake GPU 2
    """
    g = read_gpus(tmp_path, scenario, range(4))
    assert [g[i]["temp"] for i in range(4)] == [50, 70, 60, 50]
    assert [g[i]["power"] for i in range(4)] == [100000, 1, 100000, 100000]
    assert {g[i]["name"] for i in range(4)} == {"Fake GPU 2"}


def test_wildcards_reach_gpus_that_a_later_gpus_line_adds_and_the_last_count_wins(tmp_path):
    """The fake fills only the GPUs its last `gpus = N` line gives (filling all 256 cost every
    probe child ~220 page faults): a gpu.* line must still reach every one of them, wherever
    the count is set, and a gpu.N line past the count is still parsed (and checked)."""
    scenario = """
        gpu.*.name = Early Wildcard
        gpus = 2
        gpu.9.serial = 999           # past the count: accepted, never enumerated
        gpus = 12                    # the last count wins
        gpu.*.temperature_c = 41
        gpu.11.temperature_c = 77
    """
    g = read_gpus(tmp_path, scenario, range(12))
    assert {g[i]["name"] for i in range(12)} == {"Early Wildcard"}
    assert [g[i]["temp"] for i in range(12)] == [41] * 11 + [77]
    assert g[9]["serial"] == "999"
    assert len({g[i]["uuid"] for i in range(12)}) == 12  # each GPU has its own defaults
    count, _ = run(tmp_path, scenario, READ_GPU + "N.nvmlInit()\nout(N.nvmlDeviceGetCount())\n")
    assert count == 12

def test_scenario_reread_at_each_init(tmp_path):
    """A test may rewrite the scenario between a prolog and an epilog."""
    path = tmp_path / "live"
    path.write_text("gpu.0.ecc.volatile.uncorrected = 1\n")
    code = """
path = os.environ["FAKEGPU_SCENARIO"]
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
a = N.nvmlDeviceGetTotalEccErrors(h, 1, 0)
N.nvmlShutdown()
open(path, "w").write("gpu.0.ecc.volatile.uncorrected = 9\\n")
N.nvmlInit()
b = N.nvmlDeviceGetTotalEccErrors(h, 1, 0)
r1 = cu().cuInit(0)
v = c_int(); cu().cuDriverGetVersion(byref(v))
open(path, "w").write("cuda_driver_version = 12080\\n")
r2 = cu().cuInit(0)
v2 = c_int(); cu().cuDriverGetVersion(byref(v2))
out([a, b, r1, v.value, r2, v2.value])
"""
    r, _ = run(tmp_path, None, code, env={"FAKEGPU_SCENARIO": str(path)})
    assert r == [1, 9, 0, 12040, 0, 12080]


# ------------------------------------------------------ malformed scenarios

MALFORMED = [
    ("no_equals", "gpus = 2\ngpu.0.lost\n", 2, "expected 'key = value'"),
    ("unknown_key", "# c\n\nfrobnicate = 1\n", 3, "unknown key 'frobnicate'"),
    ("unknown_gpu_key", "gpu.0.fan_speed = 3\n", 1, "unknown key 'gpu.0.fan_speed'"),
    ("bad_int", "gpus = 2\ngpu.1.temperature_c = hot\n", 2, "bad integer 'hot'"),
    ("int_range", "gpus = 257\n", 1, "out of range"),
    ("bad_float", "gpu.0.nvml.hang_s = soon\n", 1, "bad number of seconds 'soon'"),
    ("bad_bool", "gpu.0.lost = yes\n", 1, "bad boolean 'yes'"),
    ("index_range", "gpu.256.lost = 1\n", 1, "GPU index out of range 0..255"),
    ("bad_index", "gpu.x.lost = 1\n", 1, "bad GPU index"),
    ("unsupported_name", "gpu.0.unsupported = EccMode,AutoBoostedClocksEnabled\n", 1, "unknown NVML function name 'AutoBoostedClocksEnabled'"),
    ("bad_uuid", "gpu.0.uuid = 1234\n", 1, "bad uuid '1234'"),
    ("bad_pci", "gpu.0.pci_bus_id = 3b:00\n", 1, "bad pci_bus_id '3b:00'"),
    ("bad_processes", "gpu.0.processes = 12,13\n", 1, "bad processes"),
    ("bad_ecc_mode", "gpu.0.ecc_mode = on\n", 1, "bad ecc_mode 'on'"),
    ("nul_byte", "gpus = 2\x00\n", 1, "NUL byte"),
    ("past_the_count", "gpus = 2\ngpu.3.temperature_c = hot\n", 2, "bad integer 'hot'"),
    ("bad_count_late", "gpu.*.name = X\ngpus = many\n", 2, "bad integer 'many'"),
    ("count_range_late", "gpu.*.name = X\ngpus = 8\ngpus = 300\n", 3, "out of range"),
]


@pytest.mark.parametrize("text,line,what", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_scenario_fails_init(tmp_path, text, line, what):
    path = tmp_path / "scenario"
    path.write_text(text)
    code = """
nvml = E(N.nvmlInit)
r = cu().cuInit(0)
c = c_int(-1)
out([nvml, r, cu().cuDeviceGetCount(byref(c))])
"""
    r, proc = run(tmp_path, None, code, env={"FAKEGPU_SCENARIO": str(path)})
    assert r == ["NVMLError_Unknown", 1, 3]
    prefix = "fakegpu: %s:%d: " % (path, line)
    lines = [x for x in proc.stderr.splitlines() if x.startswith(prefix)]
    assert len(lines) == 2, proc.stderr  # once for NVML, once for CUDA
    assert what in lines[0]


def test_unreadable_scenario_fails_init(tmp_path):
    missing = tmp_path / "nope"
    r, proc = run(tmp_path, None, "out([E(N.nvmlInit), cu().cuInit(0)])",
                  env={"FAKEGPU_SCENARIO": str(missing)})
    assert r == ["NVMLError_Unknown", 1]
    assert "fakegpu: %s:0: cannot read scenario" % missing in proc.stderr


# ------------------------------------------- unsupported, lost, hang

ALL_QUERIES = r'''
def all_queries(h):
    """Every per-device query: its NVMLError class name, or "ok"."""
    r = _all_queries(h)
    return {k: v if isinstance(v, str) else "ok" for k, v in r.items()}

def _all_queries(h):
    U, V = N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC
    return {
        "Name": E(N.nvmlDeviceGetName, h), "UUID": E(N.nvmlDeviceGetUUID, h),
        "Serial": E(N.nvmlDeviceGetSerial, h), "PciInfo": E(N.nvmlDeviceGetPciInfo, h),
        "Index": E(N.nvmlDeviceGetIndex, h), "MinorNumber": E(N.nvmlDeviceGetMinorNumber, h),
        "EccMode": E(N.nvmlDeviceGetEccMode, h),
        "TotalEccErrors": E(N.nvmlDeviceGetTotalEccErrors, h, U, V),
        "MemoryErrorCounter": E(N.nvmlDeviceGetMemoryErrorCounter, h, U, V, 2),
        "RetiredPages": E(N.nvmlDeviceGetRetiredPages, h, 0),
        "RetiredPagesPendingStatus": E(N.nvmlDeviceGetRetiredPagesPendingStatus, h),
        "RemappedRows": E(N.nvmlDeviceGetRemappedRows, h),
        "MemoryInfo": E(N.nvmlDeviceGetMemoryInfo, h, version=N.nvmlMemory_v2),
        "ComputeRunningProcesses": E(N.nvmlDeviceGetComputeRunningProcesses, h),
        "GraphicsRunningProcesses": E(N.nvmlDeviceGetGraphicsRunningProcesses, h),
        "Temperature": E(N.nvmlDeviceGetTemperature, h, 0),
        "TemperatureThreshold": E(N.nvmlDeviceGetTemperatureThreshold, h, 1),
        "PowerUsage": E(N.nvmlDeviceGetPowerUsage, h),
        "CurrentClocksEventReasons": E(N.nvmlDeviceGetCurrentClocksEventReasons, h),
        "CurrPcieLinkGeneration": E(N.nvmlDeviceGetCurrPcieLinkGeneration, h),
        "CurrPcieLinkWidth": E(N.nvmlDeviceGetCurrPcieLinkWidth, h),
        "MaxPcieLinkGeneration": E(N.nvmlDeviceGetMaxPcieLinkGeneration, h),
        "MaxPcieLinkWidth": E(N.nvmlDeviceGetMaxPcieLinkWidth, h),
        "PersistenceMode": E(N.nvmlDeviceGetPersistenceMode, h),
        "MigMode": E(N.nvmlDeviceGetMigMode, h),
        "FieldValues": E(N.nvmlDeviceGetFieldValues, h, [230]),
        "Architecture": E(N.nvmlDeviceGetArchitecture, h),
        "CudaComputeCapability": E(N.nvmlDeviceGetCudaComputeCapability, h),
        "Brand": E(N.nvmlDeviceGetBrand, h),
        "DisplayMode": E(N.nvmlDeviceGetDisplayMode, h),
        "DisplayActive": E(N.nvmlDeviceGetDisplayActive, h),
        "UtilizationRates": E(N.nvmlDeviceGetUtilizationRates, h),
        "EncoderUtilization": E(N.nvmlDeviceGetEncoderUtilization, h),
        "DecoderUtilization": E(N.nvmlDeviceGetDecoderUtilization, h),
        "FanSpeed": E(N.nvmlDeviceGetFanSpeed, h),
        "NumFans": E(N.nvmlDeviceGetNumFans, h),
        "PerformanceState": E(N.nvmlDeviceGetPerformanceState, h),
        "ClockInfo": E(N.nvmlDeviceGetClockInfo, h, 1),
        "MaxClockInfo": E(N.nvmlDeviceGetMaxClockInfo, h, 1),
        "PowerManagementLimit": E(N.nvmlDeviceGetPowerManagementLimit, h),
        "EnforcedPowerLimit": E(N.nvmlDeviceGetEnforcedPowerLimit, h),
        "PowerManagementDefaultLimit": E(N.nvmlDeviceGetPowerManagementDefaultLimit, h),
        "PowerManagementLimitConstraints": E(N.nvmlDeviceGetPowerManagementLimitConstraints, h),
        "ComputeMode": E(N.nvmlDeviceGetComputeMode, h),
        "DriverModel": E(N.nvmlDeviceGetDriverModel, h),
        "BAR1MemoryInfo": E(N.nvmlDeviceGetBAR1MemoryInfo, h),
        "VbiosVersion": E(N.nvmlDeviceGetVbiosVersion, h),
        "TotalEnergyConsumption": E(N.nvmlDeviceGetTotalEnergyConsumption, h),
        "ProcessUtilization": E(N.nvmlDeviceGetProcessUtilization, h, 0),
        "PcieThroughput": E(N.nvmlDeviceGetPcieThroughput, h, 0),
        "GpuRecoveryAction": field_value(h, 230),
    }

def field_value(h, field):
    """One field of GetFieldValues, its own nvmlReturn as an error name"""
    v = E(N.nvmlDeviceGetFieldValues, h, [field])
    if isinstance(v, str):
        return v
    return "NVMLError_NotSupported" if v[0].nvmlReturn == N.NVML_ERROR_NOT_SUPPORTED else v[0].value.uiVal
'''
ALL_NAMES = """Name UUID Serial PciInfo Index MinorNumber EccMode TotalEccErrors MemoryErrorCounter
    RetiredPages RetiredPagesPendingStatus RemappedRows MemoryInfo ComputeRunningProcesses
    GraphicsRunningProcesses Temperature TemperatureThreshold PowerUsage CurrentClocksEventReasons
    CurrPcieLinkGeneration CurrPcieLinkWidth MaxPcieLinkGeneration MaxPcieLinkWidth PersistenceMode
    MigMode FieldValues Architecture CudaComputeCapability Brand DisplayMode DisplayActive
    UtilizationRates EncoderUtilization DecoderUtilization FanSpeed NumFans PerformanceState
    ClockInfo MaxClockInfo PowerManagementLimit EnforcedPowerLimit PowerManagementDefaultLimit
    PowerManagementLimitConstraints ComputeMode DriverModel BAR1MemoryInfo VbiosVersion
    TotalEnergyConsumption ProcessUtilization PcieThroughput GpuRecoveryAction""".split()


def test_unsupported_names(tmp_path):
    scenario = """
        gpu.0.unsupported = %s
        gpu.1.unsupported = EccMode, RemappedRows
        gpu.1.unsupported = Temperature,CurrentClocksThrottleReasons
    """ % ",".join(ALL_NAMES)
    code = ALL_QUERIES + """
N.nvmlInit()
out([all_queries(N.nvmlDeviceGetHandleByIndex(0)), all_queries(N.nvmlDeviceGetHandleByIndex(1)),
     E(N.nvmlDeviceGetCurrentClocksThrottleReasons, N.nvmlDeviceGetHandleByIndex(1))])
"""
    (g0, g1, throttle), _ = run(tmp_path, scenario, code)
    assert set(g0) == set(ALL_NAMES)
    assert all(v == "NVMLError_NotSupported" for v in g0.values()), g0
    # Later line replaces the earlier list; aliases share a bit.
    unsupported1 = {k for k, v in g1.items() if v == "NVMLError_NotSupported"}
    # ... besides what a passively cooled H100 on Linux never has: fans and a driver model
    assert unsupported1 == {"Temperature", "CurrentClocksEventReasons", "FanSpeed", "NumFans", "DriverModel"}
    assert throttle == "NVMLError_NotSupported"


def test_lost_gpu(tmp_path):
    code = ALL_QUERIES + """
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(3)
h2 = N.nvmlDeviceGetHandleByUUID("GPU-fa4e0000-0000-4000-8000-000000000003")
out([all_queries(h), all_queries(h2)["Name"], s(N.nvmlDeviceGetName(N.nvmlDeviceGetHandleByIndex(2)))])
"""
    (lost, lost2, ok), _ = run(tmp_path, "gpu.3.lost = 1\n", code)
    assert set(lost.values()) == {"NVMLError_GpuIsLost"}
    assert lost2 == "NVMLError_GpuIsLost"
    assert ok == "NVIDIA H100 80GB HBM3"


def test_nvml_hang_blocks_only_that_gpu(tmp_path):
    code = """
N.nvmlInit()
h0, h1 = N.nvmlDeviceGetHandleByIndex(0), N.nvmlDeviceGetHandleByIndex(1)
t = time.monotonic(); N.nvmlDeviceGetTemperature(h1, 0); t_hang = time.monotonic() - t
t = time.monotonic(); N.nvmlDeviceGetUUID(h1); t_hang2 = time.monotonic() - t
N.nvmlDeviceGetTemperature(h0, 0)
out([t_hang, t_hang2])
"""
    (t1, t2), _ = run(tmp_path, "gpu.1.nvml.hang_s = 0.3\n", code)
    assert t1 >= 0.29 and t2 >= 0.29


# ------------------------------------------- NVML argument validation

def test_nvml_argument_validation(tmp_path):
    code = """
lib = ctypes.CDLL("libnvidia-ml.so.1")
lib.nvmlErrorString.restype = c_char_p
h = c_void_p()
cnt = c_uint()
res = {}
res["uninit_count"] = lib.nvmlDeviceGetCount_v2(byref(cnt))
res["uninit_handle"] = lib.nvmlDeviceGetHandleByIndex_v2(0, byref(h))
res["uninit_shutdown"] = lib.nvmlShutdown()
res["nvml_version_before_init"] = lib.nvmlSystemGetNVMLVersion(ctypes.create_string_buffer(80), 80)
res["init"] = lib.nvmlInitWithFlags(0)
res["init2"] = lib.nvmlInit_v2()
res["count_null"] = lib.nvmlDeviceGetCount_v2(None)
res["handle_null"] = lib.nvmlDeviceGetHandleByIndex_v2(0, None)
res["handle_range"] = lib.nvmlDeviceGetHandleByIndex_v2(8, byref(h))
lib.nvmlDeviceGetHandleByIndex_v2(0, byref(h))
res["bogus_handle"] = lib.nvmlDeviceGetTemperature(c_void_p(12345), 0, byref(cnt))
res["temp_null"] = lib.nvmlDeviceGetTemperature(h, 0, None)
res["temp_sensor"] = lib.nvmlDeviceGetTemperature(h, 5, byref(cnt))
small = ctypes.create_string_buffer(4)
res["name_small"] = lib.nvmlDeviceGetName(h, small, 4)
res["uuid_small"] = lib.nvmlDeviceGetUUID(h, small, 4)
res["driver_small"] = lib.nvmlSystemGetDriverVersion(small, 4)
res["name_null"] = lib.nvmlDeviceGetName(h, None, 96)
mem = N.c_nvmlMemory_v2_t(); mem.version = 1
res["mem_version"] = lib.nvmlDeviceGetMemoryInfo_v2(h, byref(mem))
n = c_uint(0)
res["procs_nullcount"] = lib.nvmlDeviceGetComputeRunningProcesses_v3(h, None, None)
res["ecc_bad_type"] = lib.nvmlDeviceGetTotalEccErrors(h, 7, 0, byref(ctypes.c_ulonglong()))
res["fields_zero"] = lib.nvmlDeviceGetFieldValues(h, 0, None)
res["uuid_notfound"] = lib.nvmlDeviceGetHandleByUUID(b"GPU-nope", byref(h))
res["pci_notfound"] = lib.nvmlDeviceGetHandleByPciBusId_v2(b"0000:99:00.0", byref(h))
res["pci_invalid"] = lib.nvmlDeviceGetHandleByPciBusId_v2(b"zz", byref(h))
res["pci_short"] = lib.nvmlDeviceGetHandleByPciBusId_v2(b"18:00.0", byref(h))
res["shutdown1"] = lib.nvmlShutdown()
res["after_one_shutdown"] = lib.nvmlDeviceGetCount_v2(byref(cnt))
res["shutdown2"] = lib.nvmlShutdown()
res["after_two_shutdowns"] = lib.nvmlDeviceGetCount_v2(byref(cnt))
res["strings"] = [s(lib.nvmlErrorString(c)) for c in (0, 1, 2, 3, 9, 15, 999, 12345)]
out(res)
"""
    r, _ = run(tmp_path, None, code)
    assert r["uninit_count"] == r["uninit_handle"] == r["uninit_shutdown"] == 1
    assert r["nvml_version_before_init"] == 0
    assert r["init"] == r["init2"] == 0
    assert r["count_null"] == r["handle_null"] == r["handle_range"] == 2
    assert r["bogus_handle"] == r["temp_null"] == r["temp_sensor"] == 2
    assert r["name_small"] == r["uuid_small"] == r["driver_small"] == 7
    assert r["name_null"] == 2
    assert r["mem_version"] == 25
    assert r["procs_nullcount"] == 2
    assert r["ecc_bad_type"] == 2
    assert r["fields_zero"] == 2
    assert r["uuid_notfound"] == r["pci_notfound"] == 6
    assert r["pci_invalid"] == 2
    assert r["pci_short"] == 0
    assert r["shutdown1"] == 0 and r["after_one_shutdown"] == 0  # refcounted
    assert r["shutdown2"] == 0 and r["after_two_shutdowns"] == 1
    assert r["strings"] == ["Success", "Uninitialized", "Invalid Argument", "Not Supported",
                            "Driver Not Loaded", "GPU is lost", "Unknown Error", "Unknown Error"]


def test_nvml_many_threads(tmp_path):
    code = """
N.nvmlInit()
errors = []
def worker(i):
    try:
        for _ in range(200):
            h = N.nvmlDeviceGetHandleByIndex(i % 8)
            assert N.nvmlDeviceGetIndex(h) == i % 8
            N.nvmlDeviceGetTotalEccErrors(h, 1, 0)
            N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
    except Exception as e:
        errors.append(repr(e))
ts = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
[t.start() for t in ts]; [t.join() for t in ts]
out(errors)
"""
    r, _ = run(tmp_path, "gpu.*.ecc.volatile.uncorrected = 1\n", code)
    assert r == []


# ------------------------------------------------------------------ CUDA

def test_cuda_before_init_and_error_names(tmp_path):
    code = """
c = c_int(); d = c_int()
before = [cu().cuDeviceGetCount(byref(c)), cu().cuDeviceGet(byref(d), 0), cu().cuCtxSynchronize(),
          cu().cuDriverGetVersion(byref(c)), c.value]
names = {code: err_name(code) for code in (0, 1, 2, 3, 100, 101, 201, 214, 220, 226, 700, 802, 999, 4242)}
p = c_char_p(); cu().cuGetErrorString(214, byref(p))
out([before, names, s(p.value)])
"""
    (before, names, text), _ = run(tmp_path, None, code)
    assert before == [3, 3, 3, 0, 12040]
    expect = {0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
              3: "CUDA_ERROR_NOT_INITIALIZED", 100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE",
              201: "CUDA_ERROR_INVALID_CONTEXT", 214: "CUDA_ERROR_ECC_UNCORRECTABLE",
              220: "CUDA_ERROR_NVLINK_UNCORRECTABLE", 226: "CUDA_ERROR_CONTAINED",
              700: "CUDA_ERROR_ILLEGAL_ADDRESS", 802: "CUDA_ERROR_SYSTEM_NOT_READY", 999: "CUDA_ERROR_UNKNOWN"}
    for code, name in expect.items():
        assert names[str(code)] == [0, name]
    assert names["4242"] == [1, None]
    assert text == "uncorrectable ECC error encountered"


CUDA_ENUM = """
r = cu().cuInit(0)
n = c_int(-1)
cu().cuDeviceGetCount(byref(n))
devs = []
for i in range(n.value):
    u = ctypes.create_string_buffer(16)
    cu().cuDeviceGetUuid(u, i)
    bus = ctypes.create_string_buffer(32)
    cu().cuDeviceGetPCIBusId(bus, 32, i)
    devs.append([u.raw.hex(), s(bus.value)])
d = c_int()
out([r, n.value, devs, cu().cuDeviceGet(byref(d), n.value)])
"""


def uuid_hex(i):
    return "fa4e0000000040008000%012x" % i


@pytest.mark.parametrize("cvd,expect", [
    (None, list(range(8))),
    ("3,1", [3, 1]),
    ("GPU-fa4e0000-0000-4000-8000-000000000005,0", [5, 0]),
    ("GPU-fa4e0000-0000-4000-8000-00000000000", []),     # ambiguous prefix: ends the list
    ("GPU-fa4e0000-0000-4000-8000-0000000000,2", []),   # also ambiguous
    ("2,GPU-fa4e0000-0000-4000-8000-000000000006", [2, 6]),
    ("1,9,2", [1]),          # out of range entry ends the list
    ("1,x,2", [1]),
    ("1,1,2", [1]),          # repeated entry ends the list
    ("", []),
], ids=["unset", "indices", "uuid", "ambiguous", "ambiguous2", "mixed", "range", "junk", "dup", "empty"])
def test_cuda_visible_devices(tmp_path, cvd, expect):
    env = {} if cvd is None else {"CUDA_VISIBLE_DEVICES": cvd}
    (r, n, devs, past_end), _ = run(tmp_path, None, CUDA_ENUM, env=env)
    assert n == len(expect)
    assert r == (0 if expect else 100)
    assert [d[0] for d in devs] == [uuid_hex(i) for i in expect]
    assert [d[1] for d in devs] == ["0000:%02X:00.0" % (0x18 + 0x10 * i) for i in expect]
    assert past_end == 101


def test_cuda_uuid_prefix_and_nvml_agree(tmp_path):
    scenario = "gpu.4.uuid = GPU-513536b6-7d19-9063-b049-1e69664bb298\n"
    code = """
N.nvmlInit()
nv = s(N.nvmlDeviceGetUUID(N.nvmlDeviceGetHandleByIndex(4)))
cu().cuInit(0)
u = ctypes.create_string_buffer(16)
cu().cuDeviceGetUuid_v2(u, 0)
name = ctypes.create_string_buffer(8)
cu().cuDeviceGetName(name, 8, 0)
tm = c_size_t(); cu().cuDeviceTotalMem_v2(byref(tm), 0)
out([nv, u.raw.hex(), s(name.value), tm.value])
"""
    (nv, raw, name, total), _ = run(tmp_path, scenario, code, env={"CUDA_VISIBLE_DEVICES": "GPU-5135"})
    assert raw == nv[4:].replace("-", "")
    assert name == "NVIDIA "  # truncated to the buffer, like CUDA
    assert total == 81559 * MIB


def test_cuda_healthy_round_trip(tmp_path):
    code = """
cu().cuInit(0)
assert ctx(0) == 0
size = 1 << 20
r, p = alloc(size)
pattern = bytes(range(256)) * (size // 256)
rc = [r, cu().cuMemcpyHtoD_v2(p, pattern, size)]
r2, back = dtoh(p, size)
rc.append(r2)
same = back == pattern
# unaligned sub-ranges across chunk boundaries
piece = os.urandom(200000)
rc.append(cu().cuMemcpyHtoD_v2(p + 65536 - 17, piece, len(piece)))
r3, back2 = dtoh(p + 65536 - 17, len(piece))
rc.append(r3)
# memset D8 over a sub-range, D32 over the whole allocation
rc.append(cu().cuMemsetD8_v2(p + 3, 0xAB, 70000))
r4, b4 = dtoh(p, 80000)
rc.append(cu().cuMemsetD32_v2(p, 0xDEADBEEF, size // 4))
r5, b5 = dtoh(p + 1000, 16)
rc.append(cu().cuCtxSynchronize())
rc.append(cu().cuMemFree_v2(p))
out([rc, same, back2 == piece, b4[:3] == pattern[:3], b4[3:70003] == b"\\xab" * 70000,
     b4[70003:] == piece[70003 - 65519:80000 - 65519], b5.hex(), r4, r5])
"""
    (rc, same, same2, head, mid, tail, b5, r4, r5), _ = run(tmp_path, None, code)
    assert rc == [0] * len(rc)
    assert same and same2 and head and mid and tail
    assert b5 == "efbeadde" * 4  # little-endian 32-bit words
    assert r4 == r5 == 0


def test_cuda_invalid_pointers_and_contexts(tmp_path):
    code = """
cu().cuInit(0)
rc = {}
r, p = alloc(100)
rc["alloc_no_ctx"] = r
rc["ctx"] = ctx(0)
r, p = alloc(4096)
rc["alloc"] = r
buf = ctypes.create_string_buffer(8192)
rc["dtoh_past_end"] = cu().cuMemcpyDtoH_v2(buf, p + 4000, 200)
rc["htod_unknown"] = cu().cuMemcpyHtoD_v2(12345, buf, 1)
rc["memset_misaligned"] = cu().cuMemsetD32_v2(p + 2, 0, 1)
rc["memset_past_end"] = cu().cuMemsetD8_v2(p, 0, 4097)
rc["alloc_zero"] = alloc(0)[0]
rc["free_inner"] = cu().cuMemFree_v2(p + 8)
rc["free"] = cu().cuMemFree_v2(p)
rc["free_twice"] = cu().cuMemFree_v2(p)
rc["bad_device"] = cu().cuDevicePrimaryCtxRetain(byref(c_void_p()), 8)
rc["release"] = cu().cuDevicePrimaryCtxRelease_v2(0)
rc["release_again"] = cu().cuDevicePrimaryCtxRelease(0)
rc["sync_destroyed"] = cu().cuCtxSynchronize()
out(rc)
"""
    r, _ = run(tmp_path, None, code)
    assert r["alloc_no_ctx"] == 201 and r["ctx"] == 0 and r["alloc"] == 0
    for k in ("dtoh_past_end", "htod_unknown", "memset_misaligned", "memset_past_end",
              "alloc_zero", "free_inner", "free_twice"):
        assert r[k] == 1, k
    assert r["free"] == 0
    assert r["bad_device"] == 101
    assert r["release"] == 0 and r["release_again"] == 201 and r["sync_destroyed"] == 201


def test_cuda_mem_get_info_and_oom(tmp_path):
    scenario = """
        gpu.0.memory.total_mib = 1024
        gpu.0.memory.used_mib = 100
        gpu.0.memory.reserved_mib = 24
    """
    code = """
cu().cuInit(0)
ctx(0)
f, t = c_size_t(), c_size_t()
cu().cuMemGetInfo_v2(byref(f), byref(t))
r1, p = alloc(512 << 20)
f2 = c_size_t(); cu().cuMemGetInfo_v2(byref(f2), byref(t))
r2, _ = alloc(400 << 20)
r3, q = alloc(300 << 20)
cu().cuMemFree_v2(p)
r4, _ = alloc(400 << 20)
out([f.value, t.value, r1, f2.value, r2, r3, r4])
"""
    r, _ = run(tmp_path, scenario, code)
    assert r[:2] == [900 * MIB, 1024 * MIB]
    assert r[2] == 0 and r[3] == 388 * MIB
    assert r[4] == 2 and r[5] == 0 and r[6] == 0


def test_cuda_huge_allocation_is_lazy(tmp_path):
    """64 GiB: memset, then read back a few chunks, without using the RAM."""
    code = """
import resource
cu().cuInit(0)
ctx(0)
size = 64 << 30
r, p = alloc(size)
rc = [r, cu().cuMemsetD32_v2(p, 0xA5A5A5A5, size // 4)]
ok = True
for off in (0, size // 3, size - (64 << 20)):
    off -= off % 4
    r2, b = dtoh(p + off, 64 << 20)
    rc.append(r2)
    ok = ok and b == b"\\xa5" * (64 << 20)
# a write in the middle is read back; its neighbours keep the fill
mid = size // 2 + 5
rc.append(cu().cuMemcpyHtoD_v2(mid, b"hello", 5) if False else cu().cuMemcpyHtoD_v2(p + mid, b"hello", 5))
r3, b3 = dtoh(p + mid - 2, 9)
rc.append(r3)
rc.append(cu().cuMemFree_v2(p))
out([rc, ok, b3.hex(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss])
"""
    (rc, ok, b3, maxrss_kib), _ = run(tmp_path, None, code)
    assert rc == [0] * len(rc)
    assert ok
    assert bytes.fromhex(b3) == b"\xa5\xa5hello\xa5\xa5"
    assert maxrss_kib < 1024 * 1024  # well under 1 GiB for a 64 GiB allocation


@pytest.mark.parametrize("code", [214, 2, 700])
def test_cuda_alloc_error(tmp_path, code):
    scn = "gpus = 2\ngpu.1.cuda.alloc_error = %d\n" % code
    prog = """
cu().cuInit(0)
res = []
for i in range(2):
    ctx(i)
    res.append(alloc(4096)[0])
out(res)
"""
    r, _ = run(tmp_path, scn, prog)
    assert r == [0, code]


def test_cuda_init_error_and_lost(tmp_path):
    scn = "gpus = 4\ngpu.0.cuda.init_error = 802\ngpu.1.lost = 1\ngpu.3.compute_mode = prohibited\n"
    r, _ = run(tmp_path, scn, "cu().cuInit(0)\nout([ctx(0), ctx(1), ctx(2), ctx(3)])")
    assert r == [802, 999, 0, 46]  # 46: CUDA_ERROR_DEVICE_UNAVAILABLE, compute-prohibited


def test_cuda_corrupt_round_trip_mismatch(tmp_path):
    prog = """
cu().cuInit(0)
res = []
for i in range(2):
    ctx(i)
    r, p = alloc(1 << 16)
    data = bytes(range(256)) * 256
    h = cu().cuMemcpyHtoD_v2(p, data, len(data))
    r2, back = dtoh(p, len(data))
    diff = [j for j in range(len(data)) if data[j] != back[j]]
    res.append([r, h, r2, diff, bin(data[diff[0]] ^ back[diff[0]]).count("1") if diff else 0])
out(res)
"""
    r, _ = run(tmp_path, "gpu.1.cuda.corrupt = 1\n", prog)
    assert r[0] == [0, 0, 0, [], 0]
    assert r[1][:3] == [0, 0, 0] and len(r[1][3]) == 1 and r[1][4] == 1  # one flipped bit


def test_cuda_hang_blocks(tmp_path):
    prog = """
cu().cuInit(0)
t = time.monotonic(); r = ctx(0); dt = time.monotonic() - t
out([r, dt])
"""
    (r, dt), _ = run(tmp_path, "gpu.0.cuda.hang_s = 0.3\n", prog)
    assert r == 0 and dt >= 0.29


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGABRT])
def test_cuda_crash_signal_kills(tmp_path, sig):
    prog = "cu().cuInit(0)\nctx(0)\nalloc(4096)\nout('survived')\n"
    r, proc = run(tmp_path, "gpu.*.cuda.crash = %d\n" % sig, prog, check=False)
    assert r is None
    assert proc.returncode == -sig


# ------------------------------------------------------------- acceptance

def test_acceptance_issue_scenario(tmp_path):
    scenario = """
        gpus = 8
        gpu.2.ecc.volatile.uncorrected = 3
        gpu.5.lost = 1
        gpu.6.remap.pending = 1
        gpu.7.cuda.alloc_error = 214
    """
    code = """
N.nvmlInit()
n = N.nvmlDeviceGetCount()
hs = [N.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
unc = [E(N.nvmlDeviceGetTotalEccErrors, h, N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC) for h in hs]
remap = [E(N.nvmlDeviceGetRemappedRows, h) for h in hs]
cu().cuInit(0)
allocs = []
for i in range(8):
    r = ctx(i)
    allocs.append(r if r else alloc(1 << 20)[0])
out([n, unc, remap, allocs])
"""
    (n, unc, remap, allocs), _ = run(tmp_path, scenario, code)
    assert n == 8
    assert unc == [0, 0, 3, 0, 0, "NVMLError_GpuIsLost", 0, 0]
    assert remap[5] == "NVMLError_GpuIsLost"
    assert remap[6] == [0, 0, 1, 0]
    assert all(remap[i] == [0, 0, 0, 0] for i in (0, 1, 2, 3, 4, 7))
    # GPU 5 is lost: its context fails (documented as CUDA_ERROR_UNKNOWN).
    assert allocs == [0, 0, 0, 0, 0, 999, 0, 214]


# ------------------------------------------------------- real dump replay

def _dump_expectations(path):
    root = ET.fromstring(path.read_text())
    out = []
    for gpu in root.findall("gpu"):
        def txt(p):
            node = gpu.find(p)
            value = node.text.strip() if node is not None and node.text else None
            return value if value and value.strip("[]") not in ("N/A", "REDACTED") else None
        busid = txt("pci/pci_bus_id") or gpu.get("id")
        ecc = None
        if txt("ecc_mode/current_ecc") == "Enabled":
            def total(kind, what):
                vals = [txt("ecc_errors/%s/%s_%s" % (kind, loc, what)) for loc in ("sram", "dram")]
                return sum(int(v) for v in vals if v is not None)
            ecc = [total("volatile", "correctable"), total("volatile", "uncorrectable"),
                   total("aggregate", "correctable"), total("aggregate", "uncorrectable")]
        out.append({"name": txt("product_name"), "uuid": txt("uuid"), "serial": txt("serial"),
                    "busId": busid.upper(), "ecc": ecc, "temp": txt("temperature/gpu_temp")})
    return out


@pytest.mark.parametrize("dump", DUMPS, ids=[d.stem for d in DUMPS])
def test_replay_nvidia_smi_dump(tmp_path, dump):
    scenario = from_nvidia_smi.convert(dump)
    assert "# source: %s" % dump in scenario
    expect = _dump_expectations(dump)
    got = read_gpus(tmp_path, scenario, range(len(expect)))
    for i, e in enumerate(expect):
        g = got[i]
        assert g["name"] == e["name"]
        assert g["uuid"] == e["uuid"]
        assert g["busId"] == e["busId"]
        if e["serial"] is None:
            assert g["serial"] == "NVMLError_NotSupported"
        else:
            assert g["serial"] == e["serial"]
        if e["ecc"] is None:
            assert g["ecc"] == ["NVMLError_NotSupported"] * 4
        else:
            assert g["ecc"] == e["ecc"]
        if e["temp"] is not None:
            assert g["temp"] == int(e["temp"].split()[0])


def test_replay_details_tesla_t4(tmp_path):
    dump = FIXTURES / "tesla-t4.xml"
    g = read_gpus(tmp_path, from_nvidia_smi.convert(dump), [0])[0]
    assert g["procs"] == [[5762, 1005 * MIB]]  # the Xorg graphics process is not a compute one
    assert g["gprocs"] == [[675, 22 * MIB]]
    assert g["mem2"][0] == 15360 * MIB and g["mem2"][1] == 388 * MIB and g["mem2"][3] == 1032 * MIB
    assert g["pcie"] == [3, 3, 8, 16]
    assert g["power"] == 26780
    assert g["thresholds"] == [93, 96, 85]
    assert g["persistence"] == 0
    assert g["retired"] == [0, 0, 0]
    assert g["remap"] == "NVMLError_NotSupported"
    assert g["mig"] == "NVMLError_NotSupported"
    assert g["pciDeviceId"] == 0x1EB810DE


def test_replay_details_a100_and_gtx(tmp_path):
    a100 = read_gpus(tmp_path, from_nvidia_smi.convert(FIXTURES / "a100-sxm4-v12.xml"), [0])[0]
    assert a100["mig"] == [1, 1] and a100["persistence"] == 0
    assert a100["retired"] == ["NVMLError_NotSupported", "NVMLError_NotSupported", "NVMLError_NotSupported"]
    assert a100["power"] == 67030 and a100["thresholds"] == [89, 92, 85]
    gtx = read_gpus(tmp_path, from_nvidia_smi.convert(FIXTURES / "gtx-1070-ti.xml"), [0])[0]
    assert gtx["ecc_mode"] == "NVMLError_NotSupported"
    assert gtx["power"] == "NVMLError_NotSupported"
    assert gtx["persistence"] == "NVMLError_NotSupported"
    assert gtx["pcie"] == [1, "NVMLError_NotSupported", 16, "NVMLError_NotSupported"]
    assert gtx["mem2"][0] == 4096 * MIB


def test_convert_multi_gpu_and_main(tmp_path, capsys):
    t4 = (FIXTURES / "tesla-t4.xml").read_text()
    body = re.search(r"(<gpu id=.*</gpu>)", t4, re.S).group(1)
    second = body.replace("GPU-d37e67a5-91dd-3774-a5cb-99096249601a",
                          "GPU-d37e67a5-91dd-3774-a5cb-99096249601b").replace("00000000:00:1E.0", "00000000:00:1F.0")
    multi = t4.replace(body, body + "\n" + second)
    path = tmp_path / "multi.xml"
    path.write_text(multi)
    assert from_nvidia_smi.main([str(path)]) == 0
    scenario = capsys.readouterr().out
    assert "gpus = 2" in scenario
    got = read_gpus(tmp_path, scenario, [0, 1])
    assert got[1]["uuid"].endswith("601b") and got[1]["busId"] == "00000000:00:1F.0"
    assert from_nvidia_smi.main([]) == 2


def test_convert_refuses_entities(tmp_path, capsys):
    evil = ('<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log [\n<!ENTITY lol "lol">\n'
            '<!ENTITY lol2 "&lol;&lol;">\n]>\n<nvidia_smi_log><driver_version>&lol2;</driver_version>'
            '</nvidia_smi_log>\n')
    with pytest.raises(from_nvidia_smi.UnsafeXMLError):
        from_nvidia_smi.convert(evil)
    path = tmp_path / "evil.xml"
    path.write_text(evil)
    assert from_nvidia_smi.main([str(path)]) == 1
    assert "entities" in capsys.readouterr().err
    # The real DOCTYPE line (external DTD, never fetched) is accepted.
    ok = '<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n<nvidia_smi_log/>\n'
    assert "gpus = 0" in from_nvidia_smi.convert(ok)


# ------------------------------------------------------------- fuzzing

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_KEYS = ["gpus", "driver_version", "cuda_driver_version", "gpu.0.name", "gpu.*.temperature_c",
         "gpu.3.processes", "gpu.1.unsupported", "gpu.2.uuid", "gpu.0.pci_bus_id", "gpu.9.nvml.hang_s",
         "gpu.0.ecc_mode", "gpu.300.lost", "gpu.x.lost", "bogus", "gpu.0.architecture", "gpu.1.brand",
         "gpu.0.cuda_cc", "gpu.0.utilization.gpu", "gpu.0.pstate", "gpu.0.fan_pct", "gpu.*.clocks.sm_mhz",
         "gpu.0.compute_mode", "gpu.0.driver_model", "gpu.0.vbios_version", "gpu.0.graphics_processes",
         "gpu.0.mig.instances", "gpu.0.mig.memory_mib", "gpu.0.temperature.gpu_max_c",
         "gpu.0.mig.gpu_instance_ids", "gpu.*.mig.memory_used_mib"]
_line = st.one_of(
    st.text(max_size=40),
    st.builds(lambda k, v, c: "%s = %s%s" % (k, v, c), st.sampled_from(_KEYS),
              st.one_of(st.text(max_size=12), st.integers(-5, 300).map(str)),
              st.sampled_from(["", " # note", "#"])),
)


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_line, max_size=8).map("\n".join))
def test_fuzz_scenario_never_crashes(tmp_path_factory, text):
    d = tmp_path_factory.mktemp("fuzz")
    path = d / "scenario"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    code = """
import ctypes, sys
lib = ctypes.CDLL("libnvidia-ml.so.1")
cuda = ctypes.CDLL("libcuda.so.1")
print(lib.nvmlInit_v2(), cuda.cuInit(0))
"""
    env = dict(os.environ, LD_LIBRARY_PATH=str(BUILD), FAKEGPU_SCENARIO=str(path))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=30, errors="replace")
    assert proc.returncode == 0, proc.stderr
    nvml_rc, cuda_rc = map(int, proc.stdout.split())
    if nvml_rc == 999:
        assert cuda_rc == 1
        assert re.search(r"^fakegpu: %s:\d+: \S" % re.escape(str(path)), proc.stderr, re.M), proc.stderr
    else:
        assert cuda_rc in (0, 100)  # 100: a scenario with gpus = 0
        assert nvml_rc == 0 or "nvml.init_error" in text


# ------------------------------------------------- monitoring keys (issue 11)

MONITORING = r'''
def plain(x):
    """ctypes values as JSON can carry them"""
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x.value if hasattr(x, "value") and not isinstance(x, (int, str)) else x

def monitoring(h):
    return {k: plain(v) for k, v in _monitoring(h).items()}

def _monitoring(h):
    util = E(N.nvmlDeviceGetUtilizationRates, h)
    bar1 = E(N.nvmlDeviceGetBAR1MemoryInfo, h)
    return {
        "util": util if isinstance(util, str) else [util.gpu, util.memory],
        "enc": E(N.nvmlDeviceGetEncoderUtilization, h), "dec": E(N.nvmlDeviceGetDecoderUtilization, h),
        "pstate": E(N.nvmlDeviceGetPerformanceState, h), "fan": E(N.nvmlDeviceGetFanSpeed, h),
        "fans": E(N.nvmlDeviceGetNumFans, h), "fan1": E(N.nvmlDeviceGetFanSpeed_v2, h, 1),
        "clocks": [E(N.nvmlDeviceGetClockInfo, h, t) for t in range(4)],
        "max_clocks": [E(N.nvmlDeviceGetMaxClockInfo, h, t) for t in range(4)],
        "clock_bad": E(N.nvmlDeviceGetClockInfo, h, 4),
        "app_clock": E(N.nvmlDeviceGetClock, h, 0, N.NVML_CLOCK_ID_APP_CLOCK_TARGET),
        "limits": [E(N.nvmlDeviceGetPowerManagementLimit, h), E(N.nvmlDeviceGetEnforcedPowerLimit, h),
                   E(N.nvmlDeviceGetPowerManagementDefaultLimit, h),
                   E(N.nvmlDeviceGetPowerManagementLimitConstraints, h)],
        "energy": E(N.nvmlDeviceGetTotalEnergyConsumption, h),
        "compute_mode": E(N.nvmlDeviceGetComputeMode, h), "driver_model": E(N.nvmlDeviceGetDriverModel, h),
        "bar1": bar1 if isinstance(bar1, str) else [bar1.bar1Total >> 20, bar1.bar1Used >> 20, bar1.bar1Free >> 20],
        "vbios": s(E(N.nvmlDeviceGetVbiosVersion, h)),
        "pcie": [E(N.nvmlDeviceGetPcieThroughput, h, 0), E(N.nvmlDeviceGetPcieThroughput, h, 1)],
        "arch": E(N.nvmlDeviceGetArchitecture, h), "brand": E(N.nvmlDeviceGetBrand, h),
        "cc": E(N.nvmlDeviceGetCudaComputeCapability, h),
        "display": [E(N.nvmlDeviceGetDisplayMode, h), E(N.nvmlDeviceGetDisplayActive, h)],
        "gpu_max": E(N.nvmlDeviceGetTemperatureThreshold, h, N.NVML_TEMPERATURE_THRESHOLD_GPU_MAX),
        "proc_util": [[p.pid, p.smUtil, p.memUtil] for p in E(N.nvmlDeviceGetProcessUtilization, h, 0)]
                     if not isinstance(E(N.nvmlDeviceGetProcessUtilization, h, 0), str)
                     else E(N.nvmlDeviceGetProcessUtilization, h, 0),
    }
'''


def test_monitoring_defaults_and_keys(tmp_path):
    scenario = """
        gpus = 2
        gpu.1.architecture = ada
        gpu.1.brand = nvidia_rtx
        gpu.1.cuda_cc = 8.9
        gpu.1.display_mode = 1
        gpu.1.display_active = 1
        gpu.1.temperature.gpu_max_c = -1
        gpu.1.utilization.gpu = 60
        gpu.1.utilization.memory = 37
        gpu.1.utilization.encoder = 3
        gpu.1.utilization.decoder = 4
        gpu.1.pstate = 8
        gpu.1.fan_pct = 30
        gpu.1.fans = 2
        gpu.1.power_limit_mw = 70000
        gpu.1.power.enforced_limit_mw = 65000
        gpu.1.power.min_limit_mw = 30000
        gpu.1.energy_mj = 123456789
        gpu.1.clocks.graphics_mhz = 0
        gpu.1.clocks.video_mhz = -1
        gpu.1.clocks.mem_max_mhz = 7001
        gpu.1.compute_mode = exclusive_process
        gpu.1.driver_model = wddm
        gpu.1.bar1.total_mib = 32768
        gpu.1.bar1.used_mib = 3732
        gpu.1.vbios_version = 95.04.53.00.01
        gpu.1.pcie.tx_kbps = 830
        gpu.1.pcie.rx_kbps = 439
        gpu.1.processes = 4937:160,34626:183
        gpu.1.graphics_processes = 1842:410,34626:183
    """
    code = MONITORING + "N.nvmlInit()\nout([monitoring(N.nvmlDeviceGetHandleByIndex(i)) for i in (0, 1)])\n"
    (h100, ada), _ = run(tmp_path, scenario, code)
    NS, IA, NF = "NVMLError_NotSupported", "NVMLError_InvalidArgument", "NVMLError_NotFound"
    # An idle H100 SXM5, as nvidia-smi -q shows a real one
    assert h100 == {
        "util": [0, 0], "enc": [0, 1000000], "dec": [0, 1000000], "pstate": 0, "fan": NS, "fans": NS,
        "fan1": NS, "clocks": [345, 345, 2619, 765], "max_clocks": [1980, 1980, 2619, 1545], "clock_bad": IA,
        "app_clock": NS, "limits": [700000, 700000, 700000, [200000, 700000]], "energy": 0,
        "compute_mode": 0, "driver_model": NS, "bar1": [131072, 1, 131071], "vbios": "96.00.74.00.01",
        "pcie": [0, 0], "arch": 9, "brand": 14, "cc": [9, 0], "display": [0, 0], "gpu_max": 85,
        "proc_util": NF}
    assert ada == {
        "util": [60, 37], "enc": [3, 1000000], "dec": [4, 1000000], "pstate": 8, "fan": 30, "fans": 2,
        "fan1": 30, "clocks": [0, 345, 2619, NS], "max_clocks": [1980, 1980, 7001, 1545], "clock_bad": IA,
        "app_clock": NS, "limits": [70000, 65000, 70000, [30000, 70000]], "energy": 123456789,
        "compute_mode": 3, "driver_model": [0, 0], "bar1": [32768, 3732, 29036], "vbios": "95.04.53.00.01",
        "pcie": [830, 439], "arch": 8, "brand": 13, "cc": [8, 9], "display": [1, 1], "gpu_max": NS,
        # three processes (34626 is C+G, counted once) share the 60 % and 37 %
        "proc_util": [[4937, 20, 12], [34626, 20, 12], [1842, 20, 12]]}


@pytest.mark.parametrize("text,what", [
    ("gpu.0.architecture = fermi\n", "bad value 'fermi' (expected one of: kepler, maxwell"),
    ("gpu.0.brand = acme\n", "bad value 'acme'"),
    ("gpu.0.cuda_cc = 9\n", "bad cuda_cc '9'"),
    ("gpu.0.cuda_cc = 9.0x\n", "bad cuda_cc '9.0x'"),
    ("gpu.0.utilization.gpu = 101\n", "integer out of range '101'"),
    ("gpu.0.pstate = 16\n", "integer out of range '16'"),
    ("gpu.0.mig.instances = 8\n", "integer out of range '8'"),
    ("gpu.0.compute_mode = exclusive\n", "bad value 'exclusive'"),
    ("gpu.0.graphics_processes = 1:2,\n", "bad processes"),
    ("gpu.0.mig.gpu_instance_ids = 0\n", "bad mig.gpu_instance_ids '0'"),
    ("gpu.0.mig.gpu_instance_ids = 3,3\n", "repeated ID in mig.gpu_instance_ids"),
    ("gpu.0.mig.gpu_instance_ids = 3,4,\n", "trailing comma"),
    ("gpu.0.mig.gpu_instance_ids = 1,2,3,4,5,6,7,8\n", "bad mig.gpu_instance_ids"),
], ids=["arch", "brand", "cc", "cc_tail", "util", "pstate", "mig", "compute_mode", "gprocs", "gi_zero",
        "gi_repeated", "gi_trailing", "gi_too_many"])
def test_malformed_monitoring_keys_fail_init(tmp_path, text, what):
    result, proc = run(tmp_path, text, "out(E(N.nvmlInit))\n")
    assert result == "NVMLError_Unknown"
    assert what in proc.stderr, proc.stderr


def test_unknown_driver_and_cuda_versions_are_not_supported(tmp_path):
    code = """
N.nvmlInit()
out([E(N.nvmlSystemGetDriverVersion), E(N.nvmlSystemGetNVMLVersion), E(N.nvmlSystemGetCudaDriverVersion)])
"""
    (driver, nvml, cuda), _ = run(tmp_path, "driver_version =\ncuda_driver_version = 0\n", code)
    assert driver == nvml == cuda == "NVMLError_NotSupported"


# ------------------------------------------------------------ MIG (issue 11)

MIG_SCENARIO = """
    gpus = 3
    gpu.1.name = NVIDIA A100-SXM4-80GB
    gpu.1.memory.total_mib = 81920
    gpu.1.mig_mode = 1
    gpu.1.mig.instances = 3
    gpu.1.processes = 4321:2000
    gpu.2.mig_mode = 1
"""


def test_mig_devices_in_nvml(tmp_path):
    code = """
N.nvmlInit()
h0, h1, h2 = (N.nvmlDeviceGetHandleByIndex(i) for i in range(3))
migs = [N.nvmlDeviceGetMigDeviceHandleByIndex(h1, k) for k in range(3)]
def info(m):
    mem = N.nvmlDeviceGetMemoryInfo(m)
    parent = N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)
    return [s(N.nvmlDeviceGetName(m)), s(N.nvmlDeviceGetUUID(m)), mem.total >> 20, mem.used,
            N.nvmlDeviceIsMigDeviceHandle(m).value, N.nvmlDeviceGetGpuInstanceId(m),
            N.nvmlDeviceGetComputeInstanceId(m), N.nvmlDeviceGetIndex(m),
            s(N.nvmlDeviceGetUUID(parent)), [p.pid for p in N.nvmlDeviceGetComputeRunningProcesses(m)],
            E(N.nvmlDeviceGetUtilizationRates, m), E(N.nvmlDeviceGetEccMode, m)]
by_uuid = N.nvmlDeviceGetHandleByUUID(s(N.nvmlDeviceGetUUID(migs[2])))
out([[info(m) for m in migs],
     [N.nvmlDeviceGetMaxMigDeviceCount(h) for h in (h0, h1, h2)],
     [E(N.nvmlDeviceGetMigDeviceHandleByIndex, h1, 3), E(N.nvmlDeviceGetMigDeviceHandleByIndex, h1, 7),
      E(N.nvmlDeviceGetMigDeviceHandleByIndex, h2, 0), E(N.nvmlDeviceGetMigDeviceHandleByIndex, h0, 0)],
     [N.nvmlDeviceIsMigDeviceHandle(h1).value, E(N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle, h1),
      E(N.nvmlDeviceGetGpuInstanceId, h0), E(N.nvmlDeviceGetGpuInstanceId, h1)],
     N.nvmlDeviceGetIndex(by_uuid), s(N.nvmlDeviceGetUUID(h1)),
     [[p.pid, p.gpuInstanceId, p.computeInstanceId] for p in N.nvmlDeviceGetComputeRunningProcesses(h1)],
     E(N.nvmlDeviceGetUtilizationRates, h1)])
"""
    (migs, counts, errors, flags, by_uuid, parent_uuid, procs, util), _ = run(tmp_path, MIG_SCENARIO, code)
    assert [m[0] for m in migs] == ["NVIDIA A100-SXM4-80GB MIG 2g.20gb"] * 3
    uuids = [m[1] for m in migs]
    assert len(set(uuids)) == 3 and all(re.match(r"^MIG-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$", u)
                                        for u in uuids)
    assert all(m[2:4] == [20480, 0] for m in migs)
    assert [m[4:8] for m in migs] == [[1, 1, 0, 0], [1, 2, 0, 1], [1, 3, 0, 2]]
    assert all(m[8] == parent_uuid for m in migs)
    assert [m[9] for m in migs] == [[4321], [], []]      # every process runs in MIG device 0
    assert all(m[10:] == ["NVMLError_NotSupported", "NVMLError_InvalidArgument"] for m in migs)
    assert counts == [0, 7, 7]
    assert errors == ["NVMLError_NotFound", "NVMLError_InvalidArgument", "NVMLError_NotFound",
                      "NVMLError_NotSupported"]
    assert flags == [0, "NVMLError_InvalidArgument", "NVMLError_NotSupported", "NVMLError_InvalidArgument"]
    assert by_uuid == 2
    assert procs == [[4321, 1, 0]] and util == "NVMLError_NotSupported"


MIG_CUDA = CUDA_ENUM + """
mem = []
for i in range(n.value):
    name = ctypes.create_string_buffer(128)
    cu().cuDeviceGetName(name, 128, i)
    total = c_size_t()
    cu().cuDeviceTotalMem_v2(byref(total), i)
    mem.append([s(name.value), total.value >> 20])
print("RESULT " + json.dumps([r, n.value, devs, mem]))
"""


def _mig_uuids(tmp_path):
    code = """
N.nvmlInit()
h1 = N.nvmlDeviceGetHandleByIndex(1)
out([s(N.nvmlDeviceGetUUID(N.nvmlDeviceGetMigDeviceHandleByIndex(h1, k))) for k in range(3)])
"""
    return run(tmp_path, MIG_SCENARIO, code)[0]


def test_mig_instance_ids_and_memory_in_use(tmp_path):
    scenario = MIG_SCENARIO + "gpu.1.mig.gpu_instance_ids = 3, 5, 6\ngpu.1.mig.memory_used_mib = 12\n"
    code = """
N.nvmlInit()
h1 = N.nvmlDeviceGetHandleByIndex(1)
migs = [N.nvmlDeviceGetMigDeviceHandleByIndex(h1, k) for k in range(3)]
out([[[N.nvmlDeviceGetGpuInstanceId(m), N.nvmlDeviceGetMemoryInfo(m).used >> 20] for m in migs],
     [p.gpuInstanceId for p in N.nvmlDeviceGetComputeRunningProcesses(h1)]])
"""
    (ids, proc_gi), _ = run(tmp_path, scenario, code)
    assert ids == [[3, 12], [5, 12], [6, 12]] and proc_gi == [3]
    # CUDA's older MIG-GPU-<uuid>/<GI>/<CI> form finds the instance by that ID
    env = {"CUDA_VISIBLE_DEVICES": "MIG-GPU-fa4e0000-0000-4000-8000-000000000001/5/0"}
    (r, n, devs, mem), _ = run(tmp_path, scenario, MIG_CUDA, env=env)
    assert (r, n) == (0, 1) and mem == [["NVIDIA A100-SXM4-80GB MIG 2g.20gb", 20480]]
    assert run(tmp_path, scenario, MIG_CUDA, env={"CUDA_VISIBLE_DEVICES": env["CUDA_VISIBLE_DEVICES"][:-3] + "2/0"})[0][:2] == [100, 0]


def test_cuda_sees_mig_devices_as_the_driver_does(tmp_path):
    migs = _mig_uuids(tmp_path)
    hexes = [m[4:].replace("-", "") for m in migs]

    def enum(cvd):
        env = {} if cvd is None else {"CUDA_VISIBLE_DEVICES": cvd}
        result, _ = run(tmp_path, MIG_SCENARIO, MIG_CUDA, env=env)
        r, n, devs, mem = result
        return r, [d[0] for d in devs], mem

    # A MIG device by its UUID: its own name, UUID and memory share
    r, uuids, mem = enum(migs[1])
    assert (r, uuids, mem) == (0, [hexes[1]], [["NVIDIA A100-SXM4-80GB MIG 2g.20gb", 20480]])
    assert enum(migs[2][:12])[1] == [hexes[2]]                     # a unique prefix is enough
    assert enum("MIG-GPU-fa4e0000-0000-4000-8000-000000000001/3/0")[1] == [hexes[2]]  # older form
    # The whole of a MIG-enabled GPU is no CUDA device, by UUID or index: the list ends there
    assert enum("GPU-fa4e0000-0000-4000-8000-000000000001")[:2] == (100, [])
    assert enum("1")[:2] == (100, [])
    assert enum("0,1,2")[1] == [uuid_hex(0)]
    # One MIG device per process: a second ends the list
    assert enum(f"{migs[0]},{migs[1]}")[1] == [hexes[0]]
    assert enum(f"0,{migs[0]}")[1] == [uuid_hex(0), hexes[0]]
    # Unset: the first MIG device stands in for its GPU; a MIG GPU without devices gives none
    assert enum(None)[1] == [uuid_hex(0), hexes[0]]


# ---------------------------------------------- converter: what dumps say (issue 11)

EDITED = HERE / "fixtures" / "nvidia-smi-xml-edited"


def test_replay_v13_sram_parity_and_secded_errors_count(tmp_path):
    g = read_gpus(tmp_path, from_nvidia_smi.convert(EDITED / "v13-ecc-sram-errors.xml"), [0])[0]
    # volatile: SRAM 5 + DRAM 7 corrected; SRAM parity 2 + SECDED 1 uncorrected
    assert g["ecc_mode"] == [1, 1]
    assert g["ecc"] == [12, 3, 20, 3]


def test_replay_newer_power_fields_and_relative_thresholds(tmp_path):
    code = MONITORING + READ_GPU + """
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
out([read_gpu(0)["power"], read_gpu(0)["thresholds"], monitoring(h)["limits"]])
"""
    # rtx-3060-v12 (driver 570): average_power_draw 11.60 W, instant 11.63 W, no power_draw
    power, _, limits = run(tmp_path, from_nvidia_smi.convert(FIXTURES / "rtx-3060-v12.xml"), code)[0]
    assert power == 11600 and limits == [170000, 170000, 170000, [100000, 190000]]
    # rtx-4000-sff-ada-v13: 38 C, T.Limit margin 49 C, so T.Limit is 87 C; slowdown at -2 C,
    # shutdown at -7 C, GPU max at 0 C relative to it
    power, thresholds, limits = run(tmp_path, from_nvidia_smi.convert(FIXTURES / "rtx-4000-sff-ada-v13.xml"),
                                    code)[0]
    assert thresholds == [89, 94, 87]
    assert power == 8810 and limits == [70000, 70000, 70000, [30000, 70000]]


@pytest.mark.parametrize("dump", DUMPS, ids=[d.stem for d in DUMPS])
def test_replay_shows_no_default_of_the_fake(tmp_path, dump):
    """Whatever the dump lacks, the fake's H100 never shows through (issue 11)."""
    root = ET.fromstring(dump.read_text())
    code = MONITORING + """
N.nvmlInit()
out([s(E(N.nvmlSystemGetDriverVersion)), E(N.nvmlSystemGetCudaDriverVersion),
     [monitoring(N.nvmlDeviceGetHandleByIndex(i)) for i in range(N.nvmlDeviceGetCount())],
     [N.nvmlDeviceGetPciInfo(N.nvmlDeviceGetHandleByIndex(i)).pciDeviceId for i in range(N.nvmlDeviceGetCount())]])
"""
    driver, cuda, gpus, pci_ids = run(tmp_path, from_nvidia_smi.convert(dump), code)[0]
    text = (root.findtext("driver_version") or "").strip()
    assert driver == (text if text and text != "N/A" else "NVMLError_NotSupported")
    assert cuda != 12040 and driver != "550.54.15"
    for gpu, got, pci_id in zip(root.findall("gpu"), gpus, pci_ids):
        assert got["vbios"] == ((gpu.findtext("vbios_version") or "").strip() or "NVMLError_NotSupported")
        bar1 = (gpu.findtext("bar1_memory_usage/total") or "N/A").split()[0]
        assert got["bar1"] == "NVMLError_NotSupported" if bar1 == "N/A" else got["bar1"][0] == int(bar1)
        assert got["arch"] != 9 or (gpu.findtext("product_architecture") or "").strip() == "Hopper"
        assert got["brand"] == "NVMLError_NotSupported" or gpu.findtext("product_brand")
        assert got["cc"] == "NVMLError_NotSupported"  # nvidia-smi -q -x never says
        # the dump's own limit where it has one (a real H200's is 700 W, as the fake's H100 default)
        limit = (gpu.findtext("gpu_power_readings/current_power_limit")
                 or gpu.findtext("power_readings/power_limit") or "N/A").split()[0]
        assert got["limits"][0] == (round(float(limit) * 1000) if limit != "N/A" else got["limits"][0])
        assert (limit != "N/A" or got["limits"][0] != 700000) and got["clocks"] != [345, 345, 2619, 765]
        assert pci_id != 0x233010DE
        if (gpu.findtext("pci/pci_device_id") or "N/A").strip().strip("[]") in ("N/A", "REDACTED"):
            assert pci_id == 0
        max_gpu = gpu.findtext("temperature/gpu_temp_max_gpu_threshold")
        if max_gpu is not None and max_gpu.strip() != "N/A":
            assert got["gpu_max"] == int(max_gpu.split()[0])


def test_replay_redacted_and_absent_fields_are_not_supported(tmp_path):
    # rtx-3090-v12 redacts its PCI IDs; rtx-4000-sff-ada-v13 its serial ("REDACTED"); gtx-1070-ti
    # (v10, minimal) has no processes section, no power draw, no brand
    g = read_gpus(tmp_path, from_nvidia_smi.convert(FIXTURES / "rtx-4000-sff-ada-v13.xml"), [0])[0]
    assert g["serial"] == "NVMLError_NotSupported"
    g = read_gpus(tmp_path, from_nvidia_smi.convert(FIXTURES / "rtx-3090-v12.xml"), [0])[0]
    assert g["pciDeviceId"] == 0
    g = read_gpus(tmp_path, from_nvidia_smi.convert(FIXTURES / "gtx-1070-ti.xml"), [0])[0]
    assert g["procs"] == g["gprocs"] == "NVMLError_NotSupported"
    assert g["power"] == "NVMLError_NotSupported"


def test_cuda_allocations_take_whole_2mib_pages(tmp_path):
    code = """
cu().cuInit(0)
ctx(0)
f, t = c_size_t(), c_size_t()
cu().cuMemGetInfo_v2(byref(f), byref(t))
r, p = alloc(1)
f2 = c_size_t(); cu().cuMemGetInfo_v2(byref(f2), byref(t))
cu().cuMemFree_v2(p)
f3 = c_size_t(); cu().cuMemGetInfo_v2(byref(f3), byref(t))
out([r, f.value - f2.value, f3.value == f.value])
"""
    r, _ = run(tmp_path, "gpus = 1\n", code)
    assert r == [0, 2 * MIB, True]
