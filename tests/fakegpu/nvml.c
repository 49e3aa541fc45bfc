/*
 * fakegpu libnvidia-ml.so.1: a stand-in for NVIDIA's NVML that serves the
 * GPUs described by the fakegpu scenario ($FAKEGPU_SCENARIO).
 *
 * Compiled against NVIDIA's own nvml.h, so every exported symbol has the
 * exact ABI the real library has; the compiler rejects any prototype that
 * differs.  NVML_NO_UNVERSIONED_FUNC_DEFS stops nvml.h from renaming
 * nvmlInit to nvmlInit_v2 (etc.) so both the old and the versioned entry
 * points can be defined, as the real library exports both.
 *
 * Thread safety: the real NVML may be called from many threads at once, and
 * the checker does so.  All shared state (the loaded scenario and the init
 * refcount) is guarded by one mutex.  Each device call copies its GPU's
 * record under the mutex and then works on the copy, so a hang (nvml.hang_s)
 * blocks only the calling thread and never the lock.
 */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include "nvml_internal.h"

#include <dlfcn.h>
#include <ctype.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>


/* Opaque to callers: a handle is the address of one entry of `devices`,
 * and the GPU index is its position in the array. */
struct nvmlDevice_st {
    char unused;
};
static struct nvmlDevice_st devices[FG_MAX_GPUS];

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static fg_scenario *scn;        /* loaded at the first successful init; never freed so
                                 * that handles stay valid across shutdown/init */
static unsigned int refcount;   /* nvmlInit* minus nvmlShutdown, like real NVML */

/* ------------------------------------------------------------------ init */

static nvmlReturn_t do_init(void)
{
    fg_scenario *tmp = malloc(sizeof *tmp);
    if (!tmp)
        return NVML_ERROR_MEMORY;
    /* Read the file every time: a test may rewrite the scenario between
     * runs (prolog, then epilog) inside one long-lived process. */
    if (fg_scenario_load(tmp) != 0) {
        free(tmp);
        return NVML_ERROR_UNKNOWN;
    }
    fg_sleep(tmp->nvml_init_hang_s);   /* a driver that never answers nvmlInit */
    if (tmp->nvml_init_error != 0) {
        nvmlReturn_t rc = (nvmlReturn_t)tmp->nvml_init_error;
        free(tmp);
        return rc;
    }
    pthread_mutex_lock(&lock);
    if (!scn) {
        scn = tmp;
        tmp = NULL;
    } else {
        memcpy(scn, tmp, sizeof *scn);
    }
    refcount++;
    pthread_mutex_unlock(&lock);
    free(tmp);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;  /* NO_GPUS / NO_ATTACH change nothing for simulated GPUs */
    return do_init();
}

nvmlReturn_t nvmlInit_v2(void)
{
    return do_init();
}

nvmlReturn_t nvmlInit(void)
{
    return do_init();
}

nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t rc = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (refcount == 0)
        rc = NVML_ERROR_UNINITIALIZED;
    else
        refcount--;
    pthread_mutex_unlock(&lock);
    return rc;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    /* The strings the real library returns (pynvml carries the same table
     * for the older codes). */
    switch ((int)result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
        return "The requested vgpu operation is not available on target device, becasue ECC is enabled";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Ran out of critical resources, other than memory";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "The provided version is invalid/unsupported";
    case NVML_ERROR_DEPRECATED: return "The requested functionality has been deprecated";
    case NVML_ERROR_NOT_READY: return "The system is not ready for the request";
    case NVML_ERROR_GPU_NOT_FOUND: return "No GPUs were found";
    case NVML_ERROR_INVALID_STATE: return "Resource not in correct state to perform requested operation";
    case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED: return "Reset not supported for given device/parameters";
    default: return "Unknown Error";
    }
}

/* --------------------------------------------------------------- helpers */

/* Copy a string into a caller buffer the way NVML does: the whole string
 * and its terminator must fit, else INSUFFICIENT_SIZE and nothing useful. */
nvmlReturn_t fg_put_string(char *dst, unsigned int length, const char *src)
{
    size_t n = strlen(src);
    if ((size_t)length < n + 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, n + 1);
    return NVML_SUCCESS;
}

/* Scenario values for the system queries that real NVML answers even
 * before nvmlInit (NVML version, CUDA driver version). */
static int system_values(char *driver, size_t cap, int *cuda)
{
    pthread_mutex_lock(&lock);
    if (scn) {
        snprintf(driver, cap, "%s", scn->driver_version);
        *cuda = scn->cuda_driver_version;
        pthread_mutex_unlock(&lock);
        return 0;
    }
    pthread_mutex_unlock(&lock);
    fg_scenario *tmp = malloc(sizeof *tmp);
    if (!tmp || fg_scenario_load(tmp) != 0) {
        free(tmp);
        return -1;
    }
    snprintf(driver, cap, "%s", tmp->driver_version);
    *cuda = tmp->cuda_driver_version;
    free(tmp);
    return 0;
}

/* Index of a handle, or -1 if it is not one of ours (caller holds lock). */
static int handle_index(nvmlDevice_t device)
{
    uintptr_t p = (uintptr_t)device, b = (uintptr_t)devices;
    if (p < b || p >= b + sizeof devices || (p - b) % sizeof devices[0] != 0)
        return -1;
    unsigned int i = (unsigned int)((p - b) / sizeof devices[0]);
    if (i >= scn->ngpus)
        return -1;
    return (int)i;
}

nvmlDevice_t fg_gpu_handle(unsigned int index)
{
    return &devices[index];
}

const fg_scenario *fg_scn(void)
{
    return scn;
}

/* See nvml_internal.h. */
nvmlReturn_t fg_dev_begin(nvmlDevice_t device, int func, int args_ok, fg_gpu *g, unsigned int *index,
                          int *mig)
{
    pthread_mutex_lock(&lock);
    if (refcount == 0) {
        pthread_mutex_unlock(&lock);
        return NVML_ERROR_UNINITIALIZED;
    }
    int i = handle_index(device);
    int m = -1;
    unsigned int mi, mk;
    if (i < 0 && mig && fg_mig_of(device, &mi, &mk) == 0 && mi < scn->ngpus &&
        scn->gpu[mi].mig_mode && mk < scn->gpu[mi].mig_instances) {
        i = (int)mi;     /* a live MIG device of a GPU this scenario has */
        m = (int)mk;
    }
    if (i < 0 || !args_ok) {
        pthread_mutex_unlock(&lock);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *g = scn->gpu[i];
    pthread_mutex_unlock(&lock);
    if (index)
        *index = (unsigned int)i;
    if (mig)
        *mig = m;
    fg_sleep(g->nvml_hang_s);   /* outside the lock: only this caller hangs */
    if (g->lost)
        return NVML_ERROR_GPU_IS_LOST;
    if (func >= 0 && (g->failing >> func) & 1)
        return g->failing_error ? (nvmlReturn_t)g->failing_error : NVML_ERROR_TIMEOUT;
    if (func >= 0 && (g->unsupported >> func) & 1)
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

static int unsupported(const fg_gpu *g, int func)
{
    return (int)((g->unsupported >> func) & 1);
}

/* ECC counters exist only while ECC is on (nvidia-smi shows N/A otherwise). */
static int ecc_counters_available(const fg_gpu *g)
{
    return g->ecc_mode == FG_ECC_ENABLED;
}

/* ---------------------------------------------------------------- system */

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    pthread_mutex_lock(&lock);
    if (refcount == 0) {
        pthread_mutex_unlock(&lock);
        return NVML_ERROR_UNINITIALIZED;
    }
    char v[FG_DRIVER_LEN];
    snprintf(v, sizeof v, "%s", scn->driver_version);
    pthread_mutex_unlock(&lock);
    if (!version)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (v[0] == '\0')
        return NVML_ERROR_NOT_SUPPORTED;   /* driver_version = (empty): a replayed dump without one */
    return fg_put_string(version, length, v);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    if (!version)
        return NVML_ERROR_INVALID_ARGUMENT;
    char drv[FG_DRIVER_LEN];
    int cuda;
    if (system_values(drv, sizeof drv, &cuda))
        return NVML_ERROR_UNKNOWN;
    if (drv[0] == '\0' || cuda == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    /* Real NVML reports "<CUDA major>.<driver version>", e.g. 12.550.54.15 */
    char v[FG_DRIVER_LEN + 16];
    snprintf(v, sizeof v, "%d.%s", cuda / 1000, drv);
    return fg_put_string(version, length, v);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    char drv[FG_DRIVER_LEN];
    int cuda;
    if (system_values(drv, sizeof drv, &cuda))
        return NVML_ERROR_UNKNOWN;
    if (cuda == 0)
        return NVML_ERROR_NOT_SUPPORTED;   /* cuda_driver_version = 0: not known */
    *cudaDriverVersion = cuda;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* ------------------------------------------------------ device discovery */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = NVML_SUCCESS;
    if (refcount == 0)
        rc = NVML_ERROR_UNINITIALIZED;
    else if (!deviceCount)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else
        *deviceCount = scn->ngpus;
    pthread_mutex_unlock(&lock);
    return rc;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = NVML_SUCCESS;
    if (refcount == 0)
        rc = NVML_ERROR_UNINITIALIZED;
    else if (!device || index >= scn->ngpus)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else
        *device = &devices[index];   /* even for a lost GPU: later calls fail */
    pthread_mutex_unlock(&lock);
    return rc;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = NVML_ERROR_NOT_FOUND;
    if (refcount == 0)
        rc = NVML_ERROR_UNINITIALIZED;
    else if (!uuid || !device)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else
        for (unsigned int i = 0; i < scn->ngpus && rc != NVML_SUCCESS; i++) {
            const fg_gpu *g = &scn->gpu[i];
            if (strcasecmp(g->uuid, uuid) == 0) {
                *device = &devices[i];
                rc = NVML_SUCCESS;
            }
            /* Real NVML (r470+) takes a MIG device's UUID too. */
            for (unsigned int k = 0; g->mig_mode && k < g->mig_instances && rc != NVML_SUCCESS; k++) {
                unsigned char b[16];
                char text[FG_UUID_LEN];
                fg_mig_uuid(g, k, b, text, sizeof text);
                if (strcasecmp(text, uuid) == 0) {
                    *device = fg_mig_handle(i, k);
                    rc = NVML_SUCCESS;
                }
            }
        }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Accepts what real NVML accepts: "domain:bus:device.function",
 * "domain:bus:device" or "bus:device.function", hex in either case. */
static int parse_bus_id(const char *s, unsigned int *dom, unsigned int *bus, unsigned int *dev)
{
    unsigned int part[3];
    int nparts = 0;
    const char *p = s;
    for (;;) {
        if (nparts == 3)
            return -1;
        char *end;
        if (!isxdigit((unsigned char)*p))
            return -1;
        unsigned long v = strtoul(p, &end, 16);
        if (end - p > 8)
            return -1;
        part[nparts++] = (unsigned int)v;
        p = end;
        if (*p == ':') {
            p++;
            continue;
        }
        break;
    }
    if (*p == '.') {
        p++;
        if (*p != '0' || p[1] != '\0')
            return -1;
    } else if (*p != '\0') {
        return -1;
    }
    if (nparts == 3) {
        *dom = part[0];
        *bus = part[1];
        *dev = part[2];
    } else if (nparts == 2) {
        *dom = 0;
        *bus = part[0];
        *dev = part[1];
    } else {
        return -1;
    }
    return 0;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = NVML_ERROR_NOT_FOUND;
    unsigned int dom, bus, dev;
    if (refcount == 0)
        rc = NVML_ERROR_UNINITIALIZED;
    else if (!pciBusId || !device || parse_bus_id(pciBusId, &dom, &bus, &dev))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    else
        for (unsigned int i = 0; i < scn->ngpus; i++) {
            const fg_gpu *g = &scn->gpu[i];
            if (g->pci_domain == dom && g->pci_bus == bus && g->pci_device == dev) {
                *device = &devices[i];
                rc = NVML_SUCCESS;
                break;
            }
        }
    pthread_mutex_unlock(&lock);
    return rc;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

/* -------------------------------------------------------------- identity */

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    BEGIN_MIG(FG_F_Name, name != NULL);
    if (mig >= 0) {
        char text[FG_NAME_LEN];
        fg_mig_name(&g, text, sizeof text);
        return fg_put_string(name, length, text);
    }
    return fg_put_string(name, length, g.name);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    BEGIN_MIG(FG_F_UUID, uuid != NULL);
    if (mig >= 0) {
        unsigned char b[16];
        char text[FG_UUID_LEN];
        fg_mig_uuid(&g, (unsigned int)mig, b, text, sizeof text);
        return fg_put_string(uuid, length, text);
    }
    return fg_put_string(uuid, length, g.uuid);
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    BEGIN(FG_F_Serial, serial != NULL);
    return fg_put_string(serial, length, g.serial);
}

static void fill_pci(const fg_gpu *g, nvmlPciInfo_t *pci)
{
    memset(pci, 0, sizeof *pci);
    pci->domain = g->pci_domain;
    pci->bus = g->pci_bus;
    pci->device = g->pci_device;
    pci->pciDeviceId = g->pci_device_id;
    pci->pciSubSystemId = g->pci_subsystem_id;
    snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT,
             g->pci_domain, g->pci_bus, g->pci_device);
    /* The legacy field has room for a 4-digit domain only. */
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT,
             g->pci_domain & 0xffff, g->pci_bus, g->pci_device);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    BEGIN(FG_F_PciInfo, pci != NULL);
    fill_pci(&g, pci);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    BEGIN_MIG(FG_F_Index, index != NULL);
    /* A MIG device's index is its index under its GPU (nvml.h). */
    *index = mig >= 0 ? (unsigned int)mig : idx;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    BEGIN(FG_F_MinorNumber, minorNumber != NULL);
    *minorNumber = g.minor_number;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
    BEGIN_MIG(FG_F_Architecture, arch != NULL);
    *arch = g.arch;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    BEGIN_MIG(FG_F_CudaComputeCapability, major != NULL && minor != NULL);
    *major = (int)g.cc_major;
    *minor = (int)g.cc_minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    BEGIN_MIG(FG_F_Brand, type != NULL);
    *type = (nvmlBrandType_t)g.brand;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t *display)
{
    BEGIN(FG_F_DisplayMode, display != NULL);
    *display = g.display_mode ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, nvmlEnableState_t *isActive)
{
    BEGIN(FG_F_DisplayActive, isActive != NULL);
    *isActive = g.display_active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    BEGIN(FG_F_PersistenceMode, mode != NULL);
    *mode = g.persistence_mode ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    BEGIN(FG_F_MigMode, currentMode != NULL && pendingMode != NULL);
    *currentMode = *pendingMode = g.mig_mode ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------- ECC */

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current, nvmlEnableState_t *pending)
{
    BEGIN(FG_F_EccMode, current != NULL && pending != NULL);
    if (g.ecc_mode == FG_ECC_UNSUPPORTED)
        return NVML_ERROR_NOT_SUPPORTED;
    int p = g.ecc_pending < 0 ? g.ecc_mode : g.ecc_pending;
    *current = g.ecc_mode == FG_ECC_ENABLED ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    *pending = p == FG_ECC_ENABLED ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

static int ecc_args_ok(nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter)
{
    return (type == NVML_MEMORY_ERROR_TYPE_CORRECTED || type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED) &&
           (counter == NVML_VOLATILE_ECC || counter == NVML_AGGREGATE_ECC);
}

static int ecc_count(const fg_gpu *g, nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter,
                     unsigned long long *out)
{
    if (type != NVML_MEMORY_ERROR_TYPE_CORRECTED && type != NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
        return -1;
    if (counter != NVML_VOLATILE_ECC && counter != NVML_AGGREGATE_ECC)
        return -1;
    int corr = type == NVML_MEMORY_ERROR_TYPE_CORRECTED;
    if (counter == NVML_VOLATILE_ECC)
        *out = corr ? g->ecc_vol_corr : g->ecc_vol_unc;
    else
        *out = corr ? g->ecc_agg_corr : g->ecc_agg_unc;
    return 0;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType, unsigned long long *eccCounts)
{
    int args_ok = eccCounts != NULL && ecc_args_ok(errorType, counterType);
    BEGIN(FG_F_TotalEccErrors, args_ok);
    if (!ecc_counters_available(&g))
        return NVML_ERROR_NOT_SUPPORTED;
    ecc_count(&g, errorType, counterType, eccCounts);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                             nvmlEccCounterType_t counterType,
                                             nvmlMemoryLocation_t locationType, unsigned long long *count)
{
    int args_ok = count != NULL && locationType >= 0 && locationType < NVML_MEMORY_LOCATION_COUNT &&
                  ecc_args_ok(errorType, counterType);
    BEGIN(FG_F_MemoryErrorCounter, args_ok);
    if (!ecc_counters_available(&g))
        return NVML_ERROR_NOT_SUPPORTED;
    /* Every error of the scenario sits in device memory (DRAM). */
    if (locationType == NVML_MEMORY_LOCATION_DRAM)
        ecc_count(&g, errorType, counterType, count);
    else
        *count = 0;
    return NVML_SUCCESS;
}

/* Retired pages: fake, distinct, page-aligned addresses per cause. */
static unsigned long long retired_address(nvmlPageRetirementCause_t cause, unsigned int i)
{
    return (cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR ? 0x200000000ULL : 0x100000000ULL) +
           (unsigned long long)i * 0x1000ULL;
}

static nvmlReturn_t retired_pages(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                  unsigned int *pageCount, unsigned long long *addresses,
                                  unsigned long long *timestamps)
{
    int args_ok = pageCount != NULL && (cause == NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS ||
                                         cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR);
    BEGIN(FG_F_RetiredPages, args_ok);
    unsigned int n = cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR ? g.retired_dbe : g.retired_sbe;
    /* Like NVML: the caller learns the count from a too-small buffer. */
    if (*pageCount < n || (n > 0 && !addresses)) {
        *pageCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        addresses[i] = retired_address(cause, i);
        if (timestamps)
            timestamps[i] = 1700000000ULL + i;  /* seconds since the epoch */
    }
    *pageCount = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                       unsigned int *pageCount, unsigned long long *addresses)
{
    return retired_pages(device, cause, pageCount, addresses, NULL);
}

nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                          unsigned int *pageCount, unsigned long long *addresses,
                                          unsigned long long *timestamps)
{
    return retired_pages(device, cause, pageCount, addresses, timestamps);
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *isPending)
{
    BEGIN(FG_F_RetiredPagesPendingStatus, isPending != NULL);
    *isPending = g.retired_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                       unsigned int *isPending, unsigned int *failureOccurred)
{
    BEGIN(FG_F_RemappedRows, corrRows && uncRows && isPending && failureOccurred);
    /* Real NVML: not available on a MIG-enabled GPU. */
    if (g.mig_mode)
        return NVML_ERROR_NOT_SUPPORTED;
    *corrRows = g.remap_corr;
    *uncRows = g.remap_unc;
    *isPending = (unsigned int)g.remap_pending;
    *failureOccurred = (unsigned int)g.remap_failure;
    return NVML_SUCCESS;
}

/* SRAM ECC error status: NVML documents it "for Ampere or newer fully supported devices"; the
 * struct is versioned (nvmlEccSramErrorStatus_v1), a wrong version is refused as NVML does. */
nvmlReturn_t nvmlDeviceGetSramEccErrorStatus(nvmlDevice_t device, nvmlEccSramErrorStatus_t *status)
{
    BEGIN(FG_F_SramEccErrorStatus, status != NULL);
    if (status->version != nvmlEccSramErrorStatus_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (g.arch < NVML_DEVICE_ARCH_AMPERE || g.ecc_mode != FG_ECC_ENABLED)
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned int version = status->version;
    memset(status, 0, sizeof *status);
    status->version = version;
    status->aggregateUncParity = g.sram_agg_unc_parity;
    status->aggregateUncSecDed = g.sram_agg_unc_secded;
    status->bThresholdExceeded = (unsigned int)g.sram_threshold;
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------------- memory */

static unsigned long long sub_sat(unsigned long long a, unsigned long long b)
{
    return a > b ? a - b : 0;
}

/* A MIG device's memory: its share of the GPU's, mig.memory_used_mib of it in use. */
static void mig_memory(fg_gpu *g)
{
    g->mem_total_mib = fg_mig_memory_mib(g);
    g->mem_used_mib = g->mig_used_mib;
    g->mem_reserved_mib = 0;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    BEGIN_MIG(FG_F_MemoryInfo, memory != NULL);
    if (mig >= 0)
        mig_memory(&g);
    /* v1 has no "reserved": it is counted in "used". */
    memory->total = g.mem_total_mib * MIB;
    memory->used = (g.mem_used_mib + g.mem_reserved_mib) * MIB;
    memory->free = sub_sat(memory->total, memory->used);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    BEGIN_MIG(FG_F_MemoryInfo, memory != NULL);
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (mig >= 0)
        mig_memory(&g);
    memory->total = g.mem_total_mib * MIB;
    memory->reserved = g.mem_reserved_mib * MIB;
    memory->used = g.mem_used_mib * MIB;
    memory->free = sub_sat(memory->total, memory->reserved + memory->used);
    return NVML_SUCCESS;
}

/* Shared by every process-list entry point: `size` is the caller's struct
 * size (v1 or v2), written field by field. */
static nvmlReturn_t processes(nvmlDevice_t device, int func, unsigned int *infoCount, void *infos, int v2,
                              int graphics)
{
    BEGIN_MIG(func, infoCount != NULL);
    const fg_proc *list = graphics ? g.gprocs : g.procs;
    unsigned int n = graphics ? g.ngprocs : g.nprocs;
    /* With MIG on, every process runs in the first MIG device (GPU instance
     * 1, compute instance 0): listed there and, aggregated, on the GPU. */
    int in_mig = g.mig_mode && g.mig_instances > 0;
    if (mig > 0 || (g.mig_mode && !in_mig))
        n = 0;
    if (*infoCount < n || (n > 0 && !infos)) {
        *infoCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        if (v2) {
            nvmlProcessInfo_v2_t *p = (nvmlProcessInfo_v2_t *)infos + i;
            memset(p, 0, sizeof *p);
            p->pid = list[i].pid;
            p->usedGpuMemory = list[i].mib * MIB;
            p->gpuInstanceId = in_mig ? fg_mig_gi(&g, 0) : 0xFFFFFFFFu;   /* 0xFFFFFFFF: MIG off */
            p->computeInstanceId = in_mig ? 0 : 0xFFFFFFFFu;
        } else {
            nvmlProcessInfo_v1_t *p = (nvmlProcessInfo_v1_t *)infos + i;
            memset(p, 0, sizeof *p);
            p->pid = list[i].pid;
            p->usedGpuMemory = list[i].mib * MIB;
        }
    }
    *infoCount = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
    return processes(device, FG_F_ComputeRunningProcesses, infoCount, infos, 1, 0);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v2_t *infos)
{
    return processes(device, FG_F_ComputeRunningProcesses, infoCount, infos, 1, 0);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                  nvmlProcessInfo_v1_t *infos)
{
    return processes(device, FG_F_ComputeRunningProcesses, infoCount, infos, 0, 0);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos)
{
    return processes(device, FG_F_GraphicsRunningProcesses, infoCount, infos, 1, 1);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_v2_t *infos)
{
    return processes(device, FG_F_GraphicsRunningProcesses, infoCount, infos, 1, 1);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                   nvmlProcessInfo_v1_t *infos)
{
    return processes(device, FG_F_GraphicsRunningProcesses, infoCount, infos, 0, 1);
}

/* ------------------------------------------------- thermal, power, clocks */

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int *temp)
{
    BEGIN(FG_F_Temperature, temp != NULL && sensorType == NVML_TEMPERATURE_GPU);
    *temp = g.temp_c;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temperature)
{
    BEGIN(FG_F_Temperature, temperature != NULL);
    if (temperature->version != nvmlTemperature_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (temperature->sensorType != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    temperature->temperature = (int)g.temp_c;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t thresholdType,
                                               unsigned int *temp)
{
    BEGIN(FG_F_TemperatureThreshold,
          temp != NULL && thresholdType >= 0 && thresholdType < NVML_TEMPERATURE_THRESHOLD_COUNT);
    switch (thresholdType) {
    case NVML_TEMPERATURE_THRESHOLD_SHUTDOWN:
        *temp = g.temp_shutdown_c;
        return NVML_SUCCESS;
    case NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
        *temp = g.temp_slowdown_c;
        return NVML_SUCCESS;
    case NVML_TEMPERATURE_THRESHOLD_GPU_MAX:
        if (g.temp_gpu_max_c < 0)
            return NVML_ERROR_NOT_SUPPORTED;
        *temp = (unsigned int)g.temp_gpu_max_c;
        return NVML_SUCCESS;
    case NVML_TEMPERATURE_THRESHOLD_MEM_MAX:
        if (g.mem_temp_max_c == 0)
            return NVML_ERROR_NOT_SUPPORTED;
        *temp = g.mem_temp_max_c;
        return NVML_SUCCESS;
    default:
        return NVML_ERROR_NOT_SUPPORTED;
    }
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    BEGIN(FG_F_PowerUsage, power != NULL);
    *power = g.power_mw;
    return NVML_SUCCESS;
}

/* What the fake libcuda.so.1 in this process says GPU idx adds while it runs a kernel
 * (gpu.N.perf.throttle_under_load; bit 63 set: a kernel runs).  0 when no fake libcuda is
 * loaded: NVML never loads CUDA itself. */
unsigned long long fg_load_reasons(unsigned int idx)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!cuda)
        return 0;
    unsigned long long (*ask)(int) = (unsigned long long (*)(int))dlsym(cuda, "fakegpu_load_reasons");
    unsigned long long r = ask ? ask((int)idx) : 0;
    dlclose(cuda);
    return r;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *clocksEventReasons)
{
    BEGIN(FG_F_CurrentClocksEventReasons, clocksEventReasons != NULL);
    unsigned long long load = fg_load_reasons(idx);
    /* under load the GPU is not idle: the idle bit goes, the load's reasons come */
    *clocksEventReasons = load ? (g.clocks_event_reasons & ~1ULL) | (load & ~(1ULL << 63))
                               : g.clocks_event_reasons;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *clocksThrottleReasons)
{
    return nvmlDeviceGetCurrentClocksEventReasons(device, clocksThrottleReasons);
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *currLinkGen)
{
    BEGIN(FG_F_CurrPcieLinkGeneration, currLinkGen != NULL);
    *currLinkGen = g.pcie_gen_cur;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGen)
{
    BEGIN(FG_F_MaxPcieLinkGeneration, maxLinkGen != NULL);
    *maxLinkGen = g.pcie_gen_max;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *currLinkWidth)
{
    BEGIN(FG_F_CurrPcieLinkWidth, currLinkWidth != NULL);
    *currLinkWidth = g.pcie_width_cur;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *maxLinkWidth)
{
    BEGIN(FG_F_MaxPcieLinkWidth, maxLinkWidth != NULL);
    *maxLinkWidth = g.pcie_width_max;
    return NVML_SUCCESS;
}

/* ---------------------------------------------------------- field values */

void fg_set_field(nvmlFieldValue_t *v, nvmlValueType_t type, unsigned long long x)
{
    memset(&v->value, 0, sizeof v->value);
    v->valueType = type;
    if (type == NVML_VALUE_TYPE_UNSIGNED_INT)
        v->value.uiVal = (unsigned int)x;
    else
        v->value.ullVal = x;
    v->nvmlReturn = NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values)
{
    BEGIN(FG_F_FieldValues, values != NULL && valuesCount > 0);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    long long now_us = (long long)tv.tv_sec * 1000000LL + tv.tv_usec;
    int ecc_ok = ecc_counters_available(&g) && !unsupported(&g, FG_F_TotalEccErrors);
    int retired_ok = !unsupported(&g, FG_F_RetiredPages);
    int remap_ok = !unsupported(&g, FG_F_RemappedRows) && !g.mig_mode;
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = now_us;
        v->latencyUsec = 0;
        const nvmlValueType_t U = NVML_VALUE_TYPE_UNSIGNED_INT, ULL = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        int ok = 1;
        switch (v->fieldId) {
        case NVML_FI_DEV_ECC_SBE_VOL_TOTAL:
            if ((ok = ecc_ok)) fg_set_field(v, ULL, g.ecc_vol_corr);
            break;
        case NVML_FI_DEV_ECC_DBE_VOL_TOTAL:
            if ((ok = ecc_ok)) fg_set_field(v, ULL, g.ecc_vol_unc);
            break;
        case NVML_FI_DEV_ECC_SBE_AGG_TOTAL:
            if ((ok = ecc_ok)) fg_set_field(v, ULL, g.ecc_agg_corr);
            break;
        case NVML_FI_DEV_ECC_DBE_AGG_TOTAL:
            if ((ok = ecc_ok)) fg_set_field(v, ULL, g.ecc_agg_unc);
            break;
        case NVML_FI_DEV_RETIRED_SBE:
            if ((ok = retired_ok)) fg_set_field(v, ULL, g.retired_sbe);
            break;
        case NVML_FI_DEV_RETIRED_DBE:
            if ((ok = retired_ok)) fg_set_field(v, ULL, g.retired_dbe);
            break;
        case NVML_FI_DEV_RETIRED_PENDING:
            if ((ok = retired_ok && !unsupported(&g, FG_F_RetiredPagesPendingStatus)))
                fg_set_field(v, ULL, (unsigned long long)g.retired_pending);
            break;
        case NVML_FI_DEV_REMAPPED_COR:
            if ((ok = remap_ok)) fg_set_field(v, U, g.remap_corr);
            break;
        case NVML_FI_DEV_REMAPPED_UNC:
            if ((ok = remap_ok)) fg_set_field(v, U, g.remap_unc);
            break;
        case NVML_FI_DEV_REMAPPED_PENDING:
            if ((ok = remap_ok)) fg_set_field(v, U, (unsigned long long)g.remap_pending);
            break;
        case NVML_FI_DEV_REMAPPED_FAILURE:
            if ((ok = remap_ok)) fg_set_field(v, U, (unsigned long long)g.remap_failure);
            break;
#ifdef NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
        case NVML_FI_DEV_GET_GPU_RECOVERY_ACTION:
#else
        case 230:
#endif
            if ((ok = !unsupported(&g, FG_F_GpuRecoveryAction)))
                fg_set_field(v, U, g.recovery_action);
            break;
        default:
            /* NVLink, PCIe replay, HBM: nvml_fabric.c; NVLink traffic: nvml_monitor.c */
            ok = fg_fabric_field(&g, v) || fg_monitor_field(&g, v);
            break;
        }
        if (!ok) {
            memset(&v->value, 0, sizeof v->value);
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return NVML_SUCCESS;
}
