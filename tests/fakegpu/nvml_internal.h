/*
 * What the fake NVML's source files share (nvml.c, nvml_monitor.c,
 * nvml_mig.c, nvml_fabric.c, ...).  Everything here is hidden: only the nvml* entry points
 * are exported from libnvidia-ml.so.1.
 */
#ifndef FAKEGPU_NVML_INTERNAL_H
#define FAKEGPU_NVML_INTERNAL_H

#include <nvml.h>

#include "scenario.h"

#pragma GCC visibility push(hidden)

#define MIB (1024ULL * 1024ULL)

/*
 * Common start of every call that takes a device handle, in the order the
 * real library checks: initialised, valid handle and arguments, then the
 * device itself (hang, fallen off the bus, feature not supported).  `func` is
 * the fg_func bit that gpu.N.unsupported can clear, or -1.  On success *g is a
 * copy of the GPU's record and *index its NVML index.
 *
 * `mig` NULL: the call takes only whole-GPU handles, and a MIG device handle
 * is an INVALID_ARGUMENT.  Otherwise MIG device handles are accepted too, with
 * *mig = the MIG device's index under its GPU, or -1 for a GPU handle.
 */
nvmlReturn_t fg_dev_begin(nvmlDevice_t device, int func, int args_ok, fg_gpu *g, unsigned int *index,
                          int *mig);

/* The handle of GPU `index` (no checks). */
nvmlDevice_t fg_gpu_handle(unsigned int index);

/* The loaded scenario (nvml_topo.c reads the topology of two GPUs from it); loaded once a
 * call has passed fg_dev_begin. */
const fg_scenario *fg_scn(void);

/* Copy a string the way NVML does: all of it and its terminator must fit,
 * else INSUFFICIENT_SIZE. */
nvmlReturn_t fg_put_string(char *dst, unsigned int length, const char *src);

/* nvml_mig.c: the MIG device handle of (GPU index, MIG index), and the
 * reverse; fg_mig_of returns -1 when `device` is not a MIG device handle. */
nvmlDevice_t fg_mig_handle(unsigned int index, unsigned int mig);
int fg_mig_of(nvmlDevice_t device, unsigned int *index, unsigned int *mig);

/* Fill a field value: type NVML_VALUE_TYPE_UNSIGNED_INT or _UNSIGNED_LONG_LONG, return SUCCESS. */
void fg_set_field(nvmlFieldValue_t *v, nvmlValueType_t type, unsigned long long x);

/* nvml_fabric.c: one nvmlDeviceGetFieldValues entry that nvml.c does not serve (NVLink, PCIe
 * replays, HBM temperature): fills *v and returns 1, or returns 0 for NOT_SUPPORTED. */
int fg_fabric_field(const fg_gpu *g, nvmlFieldValue_t *v);
/* nvml_monitor.c: the field values monitoring tools poll (NVLink traffic); 1 if answered. */
int fg_monitor_field(const fg_gpu *g, nvmlFieldValue_t *v);

#define BEGIN(func, args_ok)                                                    \
    fg_gpu g;                                                                   \
    unsigned int idx;                                                           \
    do {                                                                        \
        nvmlReturn_t rc_ = fg_dev_begin(device, (func), (args_ok), &g, &idx, NULL); \
        if (rc_ != NVML_SUCCESS)                                                \
            return rc_;                                                         \
    } while (0)

/* As BEGIN, for the calls that also take a MIG device handle: `mig` is its
 * index under the GPU, or -1 for the GPU itself. */
#define BEGIN_MIG(func, args_ok)                                                \
    fg_gpu g;                                                                   \
    unsigned int idx;                                                           \
    int mig;                                                                    \
    do {                                                                        \
        nvmlReturn_t rc_ = fg_dev_begin(device, (func), (args_ok), &g, &idx, &mig); \
        if (rc_ != NVML_SUCCESS)                                                \
            return rc_;                                                         \
    } while (0)

/* gpu.N.perf.throttle_under_load while the fake libcuda runs a kernel on GPU idx (nvml.c) */
unsigned long long fg_load_reasons(unsigned int idx);

#pragma GCC visibility pop

#endif
