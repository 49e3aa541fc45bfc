/*
 * fakegpu libnvidia-ml.so.1: MIG device handles (gpu.N.mig_mode = 1 with
 * gpu.N.mig.instances = K gives K MIG devices under GPU N).
 *
 * A MIG device handle is the address of one entry of `mig_devices`, so it is
 * stable for the life of the process and never equal to a GPU handle.  The
 * calls that take either kind of handle (name, UUID, index, memory, process
 * lists, architecture, brand, compute capability) are in nvml.c and
 * nvml_monitor.c through BEGIN_MIG; every other call rejects a MIG handle with
 * INVALID_ARGUMENT (README.md lists where the real driver differs).
 */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include "nvml_internal.h"

#include <stdint.h>

struct nvmlDevice_st {
    char unused;
};
static struct nvmlDevice_st mig_devices[FG_MAX_GPUS][FG_MAX_MIG];

nvmlDevice_t fg_mig_handle(unsigned int index, unsigned int mig)
{
    return &mig_devices[index][mig];
}

int fg_mig_of(nvmlDevice_t device, unsigned int *index, unsigned int *mig)
{
    uintptr_t p = (uintptr_t)device, b = (uintptr_t)mig_devices;
    if (p < b || p >= b + sizeof mig_devices || (p - b) % sizeof mig_devices[0][0] != 0)
        return -1;
    size_t n = (p - b) / sizeof mig_devices[0][0];
    *index = (unsigned int)(n / FG_MAX_MIG);
    *mig = (unsigned int)(n % FG_MAX_MIG);
    return 0;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    BEGIN(FG_F_MigMode, count != NULL);
    /* nvml.h: zero when MIG is not supported or not enabled. */
    *count = g.mig_mode ? FG_MAX_MIG : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice)
{
    BEGIN(FG_F_MigMode, migDevice != NULL);
    if (!g.mig_mode)
        return NVML_ERROR_NOT_SUPPORTED;
    if (index >= FG_MAX_MIG)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= g.mig_instances)
        return NVML_ERROR_NOT_FOUND;
    *migDevice = fg_mig_handle(idx, index);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    BEGIN_MIG(-1, isMigDevice != NULL);
    *isMigDevice = mig >= 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    fg_gpu g;
    unsigned int idx;
    int mig;
    nvmlReturn_t rc = fg_dev_begin(migDevice, -1, device != NULL, &g, &idx, &mig);
    if (rc != NVML_SUCCESS)
        return rc;
    if (mig < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = fg_gpu_handle(idx);
    return NVML_SUCCESS;
}

/* GPU instance fg_mig_gi (k + 1 unless the scenario says) and compute instance 0. */
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    BEGIN_MIG(-1, id != NULL);
    if (mig < 0)
        return g.mig_mode ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
    *id = fg_mig_gi(&g, (unsigned int)mig);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    BEGIN_MIG(-1, id != NULL);
    if (mig < 0)
        return g.mig_mode ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
    *id = 0;
    return NVML_SUCCESS;
}
