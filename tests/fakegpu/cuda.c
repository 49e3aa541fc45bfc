/*
 * fakegpu libcuda.so.1: the few CUDA driver API calls a GPU health probe
 * makes (context, allocation, memset, copies), served from the fakegpu
 * scenario ($FAKEGPU_SCENARIO, read at every cuInit).
 *
 * No cuda.h is needed or used: the driver API types below are declared here
 * with the same size and layout as NVIDIA's (CUresult is an enum, i.e. an
 * int; CUdevice an int; CUdeviceptr a 64-bit integer; CUcontext an opaque
 * pointer; CUuuid 16 bytes).
 *
 * Device memory is simulated lazily, because a probe may allocate 90% of
 * an 80 GiB GPU on a machine with far less RAM: every allocation is split
 * into 64 KiB chunks, each either "unmaterialised" (all bytes follow a
 * 4-byte fill pattern, the state cuMemsetD32/D8 leave behind) or backed by
 * a malloc'd buffer, created only when a copy or a partial memset writes
 * into the chunk.  Reading an unmaterialised chunk generates its pattern.
 * Data really round-trips host -> fake device -> host, so cuda.corrupt
 * shows up as a mismatch, exactly as a bad GPU's memory would.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "scenario.h"


#include "cuda_internal.h"

/* ------------------------------------------------------------------ state */

pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
fg_scenario *scn;
int initialised;
static int visible[FG_MAX_GPUS];        /* CUdevice ordinal -> scenario index */
static int nvisible;
/* Per scenario index: the MIG device this process sees of that GPU, or -1
 * for the whole GPU.  At most one MIG device is ever visible (see below). */
static int mig_seen[FG_MAX_GPUS];
struct CUctx_st ctxs[FG_MAX_GPUS];  /* primary context per scenario GPU */
struct alloc *allocs;
unsigned long long allocated[FG_MAX_GPUS];
static unsigned long long fb_next[FG_MAX_GPUS];  /* where the next allocation starts in the GPU's memory */  /* bytes, per scenario GPU */
/* Fake device addresses: never valid host addresses in practice, aligned
 * like real allocations, never reused within a process. */
static CUdeviceptr next_va = 0x7f4000000000ULL;
__thread CUcontext current;

/* ------------------------------------------------------ error strings */

static const struct {
    int code;
    const char *name;
    const char *text;
} errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {5, "CUDA_ERROR_PROFILER_DISABLED", "profiler disabled while using external profiling tool"},
    {34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {102, "CUDA_ERROR_DEVICE_NOT_LICENSED", "device doesn't have valid Grid license"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "context already current"},
    {205, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
    {206, "CUDA_ERROR_UNMAP_FAILED", "unmapping of buffer object failed"},
    {207, "CUDA_ERROR_ARRAY_IS_MAPPED", "array is mapped"},
    {208, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {210, "CUDA_ERROR_ALREADY_ACQUIRED", "resource already acquired"},
    {211, "CUDA_ERROR_NOT_MAPPED", "resource not mapped"},
    {212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY", "resource not mapped as array"},
    {213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER", "resource not mapped as pointer"},
    {214, "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
    {215, "CUDA_ERROR_UNSUPPORTED_LIMIT", "limit is not supported on this architecture"},
    {216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE", "exclusive-thread device already in use by a different thread"},
    {217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", "invalid OpenGL or DirectX context"},
    {220, "CUDA_ERROR_NVLINK_UNCORRECTABLE", "uncorrectable NVLink error detected during the execution"},
    {221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain."},
    {223, "CUDA_ERROR_JIT_COMPILATION_DISABLED", "PTX JIT compilation was disabled"},
    {224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", "the provided execution affinity is not supported"},
    {225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC", "the provided PTX contains unsupported call to cudaDeviceSynchronize"},
    {226, "CUDA_ERROR_CONTAINED", "an exception occurred on the device that is now contained by the GPU's error containment capability"},
    {300, "CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
    {301, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", "shared object symbol not found"},
    {303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", "shared object initialization failed"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {401, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {402, "CUDA_ERROR_LOSSY_QUERY", "attempted introspection would be semantically lossy"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", "launch uses incompatible texturing mode"},
    {704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled"},
    {705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", "peer access has not been enabled"},
    {708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", "cannot set while device is active in this process"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {710, "CUDA_ERROR_ASSERT", "device-side assert triggered"},
    {711, "CUDA_ERROR_TOO_MANY_PEERS", "peer mapping resources exhausted"},
    {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
    {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
    {714, "CUDA_ERROR_HARDWARE_STACK_ERROR", "hardware stack error"},
    {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
    {716, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
    {717, "CUDA_ERROR_INVALID_ADDRESS_SPACE", "operation not supported on global/shared address space"},
    {718, "CUDA_ERROR_INVALID_PC", "invalid program counter"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "too many blocks in cooperative launch"},
    {800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
    {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward compatibility was attempted on non supported HW"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static int error_index(CUresult e)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == e)
            return (int)i;
    return -1;
}

/* Like the real driver: an unknown code is an invalid value, and *pStr is
 * set to NULL. */
EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    int i = error_index(error);
    *pStr = i < 0 ? NULL : errors[i].name;
    return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    int i = error_index(error);
    *pStr = i < 0 ? NULL : errors[i].text;
    return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* ------------------------------------------------------------------- init */

/* Drop one allocation and its host backing (caller holds lock). */
static void alloc_destroy(struct alloc *a)
{
    if (a->data)
        for (size_t c = 0; c < a->nchunks; c++)
            free(a->data[c]);
    free(a->data);
    free(a->fill);
    free(a);
}

static void free_device_allocs(int gpu)
{
    struct alloc **pp = &allocs;
    while (*pp) {
        struct alloc *a = *pp;
        if (a->gpu == gpu) {
            *pp = a->next;
            allocated[gpu] -= a->charged;
            fb_next[gpu] = 0;
            alloc_destroy(a);
        } else {
            pp = &a->next;
        }
    }
}

/* MIG device named by "MIG-<uuid>" (a unique prefix is enough) or the
 * older "MIG-GPU-<gpu uuid>/<GPU instance>/<compute instance>"; sets *mig. */
static int find_mig(const fg_scenario *s, const char *p, size_t len, int *mig)
{
    int found = -1, matches = 0;
    if (len > 8 && strncasecmp(p, "MIG-GPU-", 8) == 0) {
        const char *slash = memchr(p, '/', len);
        unsigned int gi = 0, ci = 0;
        char tail;
        char ids[32];
        if (!slash || (size_t)(p + len - slash) >= sizeof ids)
            return -1;
        memcpy(ids, slash, (size_t)(p + len - slash));
        ids[p + len - slash] = '\0';
        if (sscanf(ids, "/%5u/%5u%c", &gi, &ci, &tail) != 2 || ci != 0)   /* no overflow */
            return -1;
        size_t ulen = (size_t)(slash - (p + 4));
        for (unsigned int i = 0; i < s->ngpus; i++) {
            const fg_gpu *g = &s->gpu[i];
            if (!g->mig_mode || strlen(g->uuid) != ulen || strncasecmp(g->uuid, p + 4, ulen) != 0)
                continue;
            for (unsigned int k = 0; k < g->mig_instances; k++)
                if (fg_mig_gi(g, k) == gi) {
                    *mig = (int)k;
                    return (int)i;
                }
            return -1;
        }
        return -1;
    }
    for (unsigned int i = 0; i < s->ngpus; i++) {
        const fg_gpu *g = &s->gpu[i];
        for (unsigned int k = 0; g->mig_mode && k < g->mig_instances; k++) {
            unsigned char b[16];
            char text[FG_UUID_LEN];
            fg_mig_uuid(g, k, b, text, sizeof text);
            if (strlen(text) >= len && strncasecmp(text, p, len) == 0) {
                matches++;
                found = (int)i;
                *mig = (int)k;
            }
        }
    }
    return matches == 1 ? found : -1;
}

/*
 * CUDA_VISIBLE_DEVICES as the real driver reads it: a comma-separated list
 * of ordinals, GPU-<uuid> or MIG-<uuid> (a unique prefix is enough); the list
 * ends at the first entry that is invalid, unknown or repeated.  Unset: all
 * GPUs; empty: none.
 *
 * MIG, as the driver has it: a GPU with MIG on is not a CUDA device itself
 * (naming it by index or GPU UUID ends the list), only its MIG devices are,
 * and one process enumerates at most one MIG device: a second one ends the
 * list.  Unset, the first MIG device of the first MIG-enabled GPU with one
 * is enumerated in that GPU's place.
 */
static void parse_visible(const fg_scenario *s)
{
    const char *env = getenv("CUDA_VISIBLE_DEVICES");
    nvisible = 0;
    int migs = 0;
    for (unsigned int i = 0; i < FG_MAX_GPUS; i++)
        mig_seen[i] = -1;
    if (!env) {
        for (unsigned int i = 0; i < s->ngpus; i++) {
            const fg_gpu *g = &s->gpu[i];
            if (g->mig_mode && (migs || g->mig_instances == 0))
                continue;
            if (g->mig_mode) {
                mig_seen[i] = 0;
                migs++;
            }
            visible[nvisible++] = (int)i;
        }
        return;
    }
    const char *p = env;
    while (*p && nvisible < FG_MAX_GPUS) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && isspace((unsigned char)*p)) {
            p++;
            len--;
        }
        while (len && isspace((unsigned char)p[len - 1]))
            len--;
        int found = -1, mig = -1;
        if (len > 4 && strncasecmp(p, "MIG-", 4) == 0) {
            found = find_mig(s, p, len, &mig);
            if (found >= 0 && migs++ > 0)
                found = -1;
        } else if (len > 4 && strncasecmp(p, "GPU-", 4) == 0) {
            int matches = 0;
            for (unsigned int i = 0; i < s->ngpus; i++)
                if (strlen(s->gpu[i].uuid) >= len && strncasecmp(s->gpu[i].uuid, p, len) == 0) {
                    matches++;
                    found = (int)i;
                }
            if (matches != 1)
                found = -1;
        } else if (len > 0 && len < 6) {
            unsigned int n = 0;
            size_t k;
            for (k = 0; k < len && isdigit((unsigned char)p[k]); k++)
                n = n * 10 + (unsigned int)(p[k] - '0');
            if (k == len && n < s->ngpus)
                found = (int)n;
        }
        if (found >= 0 && mig < 0 && s->gpu[found].mig_mode)
            found = -1;     /* the whole of a MIG-enabled GPU is no CUDA device */
        for (int j = 0; j < nvisible && found >= 0; j++)
            if (visible[j] == found)
                found = -1;
        if (found < 0)
            break;
        mig_seen[found] = mig;
        visible[nvisible++] = found;
        if (!end)
            break;
        p = end + 1;
    }
}

EXPORT CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    fg_scenario *tmp = malloc(sizeof *tmp);
    if (!tmp)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (fg_scenario_load(tmp) != 0) {
        free(tmp);
        pthread_mutex_lock(&lock);
        initialised = 0;
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&lock);
    if (!scn) {
        scn = tmp;
        tmp = NULL;
    } else {
        memcpy(scn, tmp, sizeof *scn);
    }
    parse_visible(scn);
    initialised = 1;
    int n = nvisible;
    pthread_mutex_unlock(&lock);
    free(tmp);
    /* Initialised even so: cuDeviceGetCount then reports 0 devices. */
    return n == 0 ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}

/* Works before cuInit, as in the real driver. */
EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (scn) {
        *driverVersion = scn->cuda_driver_version;
        pthread_mutex_unlock(&lock);
        return CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    fg_scenario *tmp = malloc(sizeof *tmp);
    if (!tmp || fg_scenario_load(tmp) != 0) {
        free(tmp);
        return CUDA_ERROR_INVALID_VALUE;
    }
    *driverVersion = tmp->cuda_driver_version;
    free(tmp);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- devices */

/* GPU `gpu` as this process sees it: a MIG device has its own name, UUID
 * and share of the memory, none of it used by others (lock held). */
static void seen_as(int gpu, fg_gpu *g)
{
    *g = scn->gpu[gpu];
    int k = mig_seen[gpu];
    if (k < 0)
        return;
    char uuid[FG_UUID_LEN];
    fg_mig_uuid(&scn->gpu[gpu], (unsigned int)k, g->uuid_bytes, uuid, sizeof uuid);
    fg_mig_name(&scn->gpu[gpu], g->name, sizeof g->name);
    g->mem_total_mib = fg_mig_memory_mib(&scn->gpu[gpu]);
    g->mem_used_mib = scn->gpu[gpu].mig_used_mib;
    g->mem_reserved_mib = 0;
}

/* Look up a device ordinal; on success copies its record (lock held by
 * caller).  Returns a CUresult. */
CUresult device_lookup(CUdevice dev, fg_gpu *g, int *gpu)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= nvisible)
        return CUDA_ERROR_INVALID_DEVICE;
    if (gpu)
        *gpu = visible[dev];
    if (g)
        seen_as(visible[dev], g);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *count)
{
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_SUCCESS;
    if (!initialised)
        rc = CUDA_ERROR_NOT_INITIALIZED;
    else if (!count)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *count = nvisible;
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_SUCCESS;
    if (!initialised)
        rc = CUDA_ERROR_NOT_INITIALIZED;
    else if (!device)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (ordinal < 0 || ordinal >= nvisible)
        rc = CUDA_ERROR_INVALID_DEVICE;
    else
        *device = ordinal;
    pthread_mutex_unlock(&lock);
    return rc;
}

/*
 * The visible device at a PCI address, as the driver takes it: "[domain]:[bus]:[device].[function]",
 * "[domain]:[bus]:[device]" or "[bus]:[device].[function]", hexadecimal (NVML's 8-digit domain
 * and CUDA's 4-digit one both read).  No visible device there: CUDA_ERROR_INVALID_DEVICE.
 */
EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    if (!dev || !pciBusId)
        return CUDA_ERROR_INVALID_VALUE;
    unsigned int domain = 0, bus = 0, device = 0, function = 0;
    char tail;
    if (sscanf(pciBusId, "%x:%x:%x.%x%c", &domain, &bus, &device, &function, &tail) != 4
        && sscanf(pciBusId, "%x:%x:%x%c", &domain, &bus, &device, &tail) != 3) {
        domain = 0;
        if (sscanf(pciBusId, "%x:%x.%x%c", &bus, &device, &function, &tail) != 3)
            return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&lock);
    CUresult rc = initialised ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
    for (int d = 0; initialised && d < nvisible; d++) {
        const fg_gpu *g = &scn->gpu[visible[d]];
        if (g->pci_domain == domain && g->pci_bus == bus && g->pci_device == device && function == 0) {
            *dev = d;
            rc = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Common shape of the per-device queries: init, device, then argument. */
#define DEVICE_QUERY(dev, args_ok)                           \
    fg_gpu g;                                                \
    int gpu;                                                 \
    do {                                                     \
        pthread_mutex_lock(&lock);                           \
        CUresult rc_ = device_lookup((dev), &g, &gpu);       \
        pthread_mutex_unlock(&lock);                         \
        if (rc_ != CUDA_SUCCESS)                             \
            return rc_;                                      \
        if (!(args_ok))                                      \
            return CUDA_ERROR_INVALID_VALUE;                 \
    } while (0)

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    DEVICE_QUERY(dev, name != NULL && len > 0);
    (void)gpu;
    snprintf(name, (size_t)len, "%s", g.name);  /* truncated to len, like CUDA */
    return CUDA_SUCCESS;
}

/* Real CUDA prints "0000:3B:00.0": 4-digit domain, upper-case hex. */
EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    DEVICE_QUERY(dev, pciBusId != NULL && len > 0);
    (void)gpu;
    snprintf(pciBusId, (size_t)len, "%04X:%02X:%02X.0", g.pci_domain, g.pci_bus, g.pci_device);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    DEVICE_QUERY(dev, uuid != NULL);
    (void)gpu;
    memcpy(uuid->bytes, g.uuid_bytes, sizeof uuid->bytes);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid(uuid, dev);
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    DEVICE_QUERY(dev, bytes != NULL);
    (void)gpu;
    *bytes = (size_t)(g.mem_total_mib * MIB);
    return CUDA_SUCCESS;
}

/* ---------------------------------------------------------------- contexts */

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    DEVICE_QUERY(dev, pctx != NULL);
    fg_sleep(g.cuda_hang_s);            /* blocks this caller only */
    if (g.cuda_init_error)
        return g.cuda_init_error;
    if (g.lost)                         /* documented choice: what a GPU off the bus gives */
        return CUDA_ERROR_UNKNOWN;
    /* cuda.h: "Devices are often unavailable due to use of CU_COMPUTEMODE_EXCLUSIVE_PROCESS or
     * CU_COMPUTEMODE_PROHIBITED".  Exclusive-process allows one process's context on the GPU:
     * a compute process the scenario lists (not this one) holds it, so a second gets 46. */
    if (g.compute_mode == 2)            /* NVML_COMPUTEMODE_PROHIBITED */
        return CUDA_ERROR_DEVICE_UNAVAILABLE;
    if (g.compute_mode == 3 && mig_seen[gpu] < 0)   /* NVML_COMPUTEMODE_EXCLUSIVE_PROCESS */
        for (unsigned int i = 0; i < g.nprocs; i++)
            if (g.procs[i].pid != (unsigned int)getpid())
                return CUDA_ERROR_DEVICE_UNAVAILABLE;
    pthread_mutex_lock(&lock);
    ctxs[gpu].refs++;
    *pctx = &ctxs[gpu];
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    pthread_mutex_lock(&lock);
    int gpu;
    CUresult rc = device_lookup(dev, NULL, &gpu);
    if (rc == CUDA_SUCCESS) {
        if (ctxs[gpu].refs == 0) {
            rc = CUDA_ERROR_INVALID_CONTEXT;
        } else if (--ctxs[gpu].refs == 0) {
            /* The primary context is destroyed with its allocations. */
            free_device_allocs(gpu);
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return cuDevicePrimaryCtxRelease_v2(dev);
}

int ctx_index(CUcontext ctx)
{
    uintptr_t p = (uintptr_t)ctx, b = (uintptr_t)ctxs;
    if (p < b || p >= b + sizeof ctxs || (p - b) % sizeof ctxs[0] != 0)
        return -1;
    return (int)((p - b) / sizeof ctxs[0]);
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_SUCCESS;
    if (!initialised)
        rc = CUDA_ERROR_NOT_INITIALIZED;
    else if (ctx && (ctx_index(ctx) < 0 || ctx->refs == 0))
        rc = CUDA_ERROR_INVALID_CONTEXT;
    else
        current = ctx;
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    pthread_mutex_lock(&lock);
    CUresult rc = CUDA_SUCCESS;
    if (!initialised)
        rc = CUDA_ERROR_NOT_INITIALIZED;
    else if (!pctx)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *pctx = current;
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Scenario index of the calling thread's live context, or a CUresult < 0
 * convention avoided: returns CUDA_SUCCESS and sets *gpu (lock held). */
CUresult current_gpu(int *gpu)
{
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    int i = current ? ctx_index(current) : -1;
    if (i < 0 || ctxs[i].refs == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    *gpu = i;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void)
{
    pthread_mutex_lock(&lock);
    int gpu;
    CUresult rc = current_gpu(&gpu);
    double until = rc == CUDA_SUCCESS ? fg_gpu_idle_at(gpu) : 0;
    pthread_mutex_unlock(&lock);
    fg_sleep_until(until);          /* every launch and copy has finished */
    return rc;
}

/* ------------------------------------------------------------------ memory */

/* The memory in use on the device, whoever holds it: the scenario's `used_mib`, or what the
 * compute processes it lists hold where that is more (another process's allocations are gone
 * from this one's free memory on the real driver too), and this process's allocations. */
static unsigned long long device_free(int gpu)
{
    fg_gpu seen;
    seen_as(gpu, &seen);
    const fg_gpu *g = &seen;
    unsigned long long total = g->mem_total_mib * MIB, held = 0;
    for (unsigned int i = 0; mig_seen[gpu] < 0 && i < g->nprocs; i++)
        held += g->procs[i].mib;
    unsigned long long in_use = g->mem_used_mib > held ? g->mem_used_mib : held;
    unsigned long long used = (in_use + g->mem_reserved_mib) * MIB + allocated[gpu];
    return total > used ? total - used : 0;
}

EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    pthread_mutex_lock(&lock);
    int gpu;
    CUresult rc = current_gpu(&gpu);
    if (rc == CUDA_SUCCESS && (!free_bytes || !total_bytes))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        *free_bytes = (size_t)device_free(gpu);
        fg_gpu seen;
        seen_as(gpu, &seen);
        *total_bytes = (size_t)(seen.mem_total_mib * MIB);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    pthread_mutex_lock(&lock);
    int gpu;
    CUresult rc = current_gpu(&gpu);
    if (rc == CUDA_SUCCESS && (!dptr || bytesize == 0))
        rc = CUDA_ERROR_INVALID_VALUE;
    fg_gpu g;
    if (rc == CUDA_SUCCESS)
        g = scn->gpu[gpu];
    pthread_mutex_unlock(&lock);
    if (rc != CUDA_SUCCESS)
        return rc;

    if (g.cuda_crash > 0) {
        /* A driver crash: raise the signal in this process.  A handler the
         * process installed runs, as it would for a real fault; if the
         * process survives, the allocation fails. */
        raise(g.cuda_crash);
        return CUDA_ERROR_UNKNOWN;
    }
    if (g.cuda_alloc_error)
        return g.cuda_alloc_error;

    struct alloc *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->size = bytesize;
    a->gpu = gpu;
    a->nchunks = (bytesize + CHUNK - 1) / CHUNK;
    a->data = calloc(a->nchunks, sizeof a->data[0]);
    a->fill = calloc(a->nchunks, sizeof a->fill[0]);   /* fresh memory reads as zeros */
    if (!a->data || !a->fill) {
        alloc_destroy(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* The driver hands out device memory in 2 MiB pages: a 1-byte allocation takes 2 MiB. */
    a->charged = (bytesize + VA_ALIGN - 1) / VA_ALIGN * VA_ALIGN;
    pthread_mutex_lock(&lock);
    if (a->charged > device_free(gpu)) {
        pthread_mutex_unlock(&lock);
        alloc_destroy(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->fb_off = fb_next[gpu];
    fb_next[gpu] += a->charged;
    a->base = next_va;
    next_va += ((bytesize + VA_ALIGN - 1) / VA_ALIGN + 1) * VA_ALIGN;  /* + a guard gap */
    a->next = allocs;
    allocs = a;
    allocated[gpu] += a->charged;
    *dptr = a->base;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    pthread_mutex_lock(&lock);
    CUresult rc = initialised ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    if (initialised && dptr == 0)
        rc = CUDA_SUCCESS;
    if (initialised && dptr != 0)
        for (struct alloc **pp = &allocs; *pp; pp = &(*pp)->next)
            if ((*pp)->base == dptr) {
                struct alloc *a = *pp;
                *pp = a->next;
                allocated[a->gpu] -= a->charged;
                if (allocated[a->gpu] == 0)
                    fb_next[a->gpu] = 0;
                alloc_destroy(a);
                rc = CUDA_SUCCESS;
                break;
            }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* The allocation holding [p, p+n), or NULL (lock held). */
struct alloc *find_range(CUdeviceptr p, size_t n)
{
    for (struct alloc *a = allocs; a; a = a->next)
        if (p >= a->base && p - a->base <= a->size && n <= a->size - (p - a->base))
            return a;
    return NULL;
}

size_t chunk_len(const struct alloc *a, size_t c)
{
    size_t start = c * CHUNK;
    return a->size - start < CHUNK ? a->size - start : CHUNK;
}

/* Write n bytes of the 4-byte pattern `pat`, starting at phase `phase`
 * (offset within the allocation mod 4): seed 4 bytes, then double. */
void pattern_fill(unsigned char *dst, size_t n, uint32_t pat, size_t phase)
{
    unsigned char b[4];
    memcpy(b, &pat, 4);
    size_t k = n < 4 ? n : 4;
    for (size_t i = 0; i < k; i++)
        dst[i] = b[(phase + i) & 3];
    while (k < n) {
        size_t m = k <= n - k ? k : n - k;   /* k stays a multiple of 4 */
        memcpy(dst + k, dst, m);
        k += m;
    }
}

/* Give chunk c a host buffer holding its current (pattern) contents. */
int materialise(struct alloc *a, size_t c)
{
    if (a->data[c])
        return 0;
    size_t len = chunk_len(a, c);
    unsigned char *buf = malloc(len);
    if (!buf)
        return -1;
    pattern_fill(buf, len, a->fill[c], 0);   /* chunks start 4-aligned */
    a->data[c] = buf;
    return 0;
}

/* memset of [off, off+n) with the pattern; whole chunks just change their
 * fill value and drop any backing, so filling 64 GiB costs no memory. */
static CUresult dev_memset(struct alloc *a, size_t off, size_t n, uint32_t pat)
{
    size_t end = off + n;
    for (size_t c = off / CHUNK; n && c * CHUNK < end; c++) {
        size_t cs = c * CHUNK, ce = cs + chunk_len(a, c);
        size_t s = off > cs ? off : cs, e = end < ce ? end : ce;
        if (s == cs && e == ce) {
            free(a->data[c]);
            a->data[c] = NULL;
            a->fill[c] = pat;
        } else {
            if (materialise(a, c))
                return CUDA_ERROR_OUT_OF_MEMORY;
            pattern_fill(a->data[c] + (s - cs), e - s, pat, s & 3);
        }
    }
    return CUDA_SUCCESS;
}

static CUresult memset_common(CUdeviceptr dst, size_t bytes, uint32_t pat, size_t align)
{
    pthread_mutex_lock(&lock);
    int gpu;
    CUresult rc = current_gpu(&gpu);
    struct alloc *a = NULL;
    if (rc == CUDA_SUCCESS) {
        a = find_range(dst, bytes);
        if (!a || (dst - a->base) % align != 0)
            rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (rc == CUDA_SUCCESS)
        rc = dev_memset(a, (size_t)(dst - a->base), bytes, pat);
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    if (N > SIZE_MAX / 4)
        return CUDA_ERROR_INVALID_VALUE;
    uint32_t pat = ui;                  /* little-endian: memory order = value order */
    return memset_common(dstDevice, N * 4, pat, 4);
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    uint32_t pat = 0x01010101u * uc;
    return memset_common(dstDevice, N, pat, 1);
}

/* Copy host bytes into [off, off+n) of a, and out of it (lock held). */
CUresult dev_write(struct alloc *a, size_t off, const unsigned char *src, size_t n)
{
    size_t end = off + n;
    for (size_t c = off / CHUNK; n && c * CHUNK < end; c++) {
        size_t cs = c * CHUNK, ce = cs + chunk_len(a, c);
        size_t s = off > cs ? off : cs, e = end < ce ? end : ce;
        if (materialise(a, c))
            return CUDA_ERROR_OUT_OF_MEMORY;
        memcpy(a->data[c] + (s - cs), src + (s - off), e - s);
    }
    return CUDA_SUCCESS;
}

void dev_read(const struct alloc *a, size_t off, unsigned char *dst, size_t n)
{
    size_t end = off + n;
    for (size_t c = off / CHUNK; n && c * CHUNK < end; c++) {
        size_t cs = c * CHUNK, ce = cs + chunk_len(a, c);
        size_t s = off > cs ? off : cs, e = end < ce ? end : ce;
        if (a->data[c])
            memcpy(dst + (s - off), a->data[c] + (s - cs), e - s);
        else
            pattern_fill(dst + (s - off), e - s, a->fill[c], s & 3);
    }
    fg_apply_stuck(a, off, dst, n);
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    pthread_mutex_lock(&lock);
    int gpu;
    CUresult rc = current_gpu(&gpu);
    struct alloc *a = NULL;
    if (rc == CUDA_SUCCESS && ByteCount && (!srcHost || !(a = find_range(dstDevice, ByteCount))))
        rc = CUDA_ERROR_INVALID_VALUE;
    double until = 0;
    if (rc == CUDA_SUCCESS && ByteCount) {
        rc = dev_write(a, (size_t)(dstDevice - a->base), srcHost, ByteCount);
        until = fg_account_copy(a->gpu, ByteCount, 0);
    }
    pthread_mutex_unlock(&lock);
    fg_sleep_until(until);          /* synchronous: after the GPU's earlier work, for its time */
    return rc;
}

EXPORT CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    pthread_mutex_lock(&lock);
    int gpu;
    CUresult rc = current_gpu(&gpu);
    struct alloc *a = NULL;
    if (rc == CUDA_SUCCESS && ByteCount && (!dstHost || !(a = find_range(srcDevice, ByteCount))))
        rc = CUDA_ERROR_INVALID_VALUE;
    double until = 0;
    if (rc == CUDA_SUCCESS && ByteCount) {
        unsigned char *dst = dstHost;
        dev_read(a, (size_t)(srcDevice - a->base), dst, ByteCount);
        until = fg_account_copy(a->gpu, ByteCount, 1);
        /* cuda.corrupt: the memory of the allocation's GPU returns one
         * flipped bit, the signature of a bad cell. */
        if (scn->gpu[a->gpu].cuda_corrupt)
            dst[0] ^= 0x01;
    }
    /* cuda.readback_s_per_gib: the copy takes real time (a big board read back by the full
     * probe), slept outside the lock so only this caller waits */
    double pace = (rc == CUDA_SUCCESS && a) ? scn->gpu[a->gpu].cuda_readback_s_per_gib : 0.0;
    pthread_mutex_unlock(&lock);
    fg_sleep_until(until);
    if (pace > 0)
        fg_sleep(pace * (double)ByteCount / (double)(1ULL << 30));
    return rc;
}
