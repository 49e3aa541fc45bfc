/*
 * fakegpu libnvidia-ml.so.1: the monitoring calls that nvitop, gpustat and
 * Prometheus exporters make (utilization, fans, performance state, clocks,
 * power limits, energy, BAR1, VBIOS, compute mode, driver model, process
 * utilization, PCIe throughput), served from the scenario keys of README.md.
 *
 * A value the scenario switches off (gpu.N.unsupported = NAME) returns
 * NOT_SUPPORTED, as the real driver does on a board without the feature.
 */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include "nvml_internal.h"

#include <string.h>
#include <sys/time.h>

/* ----------------------------------------------------------- utilization */

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    BEGIN_MIG(FG_F_UtilizationRates, utilization != NULL);
    /* Real boards give no GPU-wide utilization while MIG is on (nvidia-smi: N/A). */
    if (g.mig_mode || mig >= 0)
        return NVML_ERROR_NOT_SUPPORTED;
    utilization->gpu = g.util_gpu;
    utilization->memory = g.util_mem;
    return NVML_SUCCESS;
}

/* Sampling period the real driver reports for the video engines (1 s). */
#define VIDEO_SAMPLING_US 1000000u

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs)
{
    BEGIN(FG_F_EncoderUtilization, utilization != NULL && samplingPeriodUs != NULL);
    *utilization = g.util_enc;
    *samplingPeriodUs = VIDEO_SAMPLING_US;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs)
{
    BEGIN(FG_F_DecoderUtilization, utilization != NULL && samplingPeriodUs != NULL);
    *utilization = g.util_dec;
    *samplingPeriodUs = VIDEO_SAMPLING_US;
    return NVML_SUCCESS;
}

static unsigned long long now_us(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (unsigned long long)tv.tv_sec * 1000000ULL + (unsigned long long)tv.tv_usec;
}

/*
 * One sample per process (compute and graphics, each PID once) while the GPU
 * is busy; the GPU's utilization is split evenly between them.  An idle GPU
 * has no samples: NOT_FOUND, as nvml.h documents.
 */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
                                             unsigned int *processSamplesCount,
                                             unsigned long long lastSeenTimeStamp)
{
    BEGIN(FG_F_ProcessUtilization, processSamplesCount != NULL);
    if (g.mig_mode)
        return NVML_ERROR_NOT_SUPPORTED;   /* nvml.h: not on MIG-enabled GPUs */
    unsigned int pids[2 * FG_MAX_PROCS], n = 0;
    for (unsigned int i = 0; i < g.nprocs + g.ngprocs; i++) {
        unsigned int pid = i < g.nprocs ? g.procs[i].pid : g.gprocs[i - g.nprocs].pid;
        unsigned int j = 0;
        while (j < n && pids[j] != pid)
            j++;
        if (j == n)
            pids[n++] = pid;
    }
    unsigned long long ts = now_us();
    int busy = g.util_gpu || g.util_mem || g.util_enc || g.util_dec;
    if (n == 0 || !busy || ts <= lastSeenTimeStamp)
        return NVML_ERROR_NOT_FOUND;
    if (!utilization || *processSamplesCount < n) {
        *processSamplesCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        nvmlProcessUtilizationSample_t *s = &utilization[i];
        memset(s, 0, sizeof *s);
        s->pid = pids[i];
        s->timeStamp = ts;
        s->smUtil = g.util_gpu / n;
        s->memUtil = g.util_mem / n;
        s->encUtil = g.util_enc / n;
        s->decUtil = g.util_dec / n;
    }
    *processSamplesCount = n;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------ fans and pstate */

static unsigned int fan_count(const fg_gpu *g)
{
    return g->fans ? g->fans : (g->fan_pct >= 0 ? 1u : 0u);
}

nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed)
{
    BEGIN(FG_F_FanSpeed, speed != NULL);
    if (g.fan_pct < 0)
        return NVML_ERROR_NOT_SUPPORTED;   /* passively cooled board */
    *speed = (unsigned int)g.fan_pct;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetFanSpeed_v2(nvmlDevice_t device, unsigned int fan, unsigned int *speed)
{
    BEGIN(FG_F_FanSpeed, speed != NULL);
    if (g.fan_pct < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (fan >= fan_count(&g))
        return NVML_ERROR_INVALID_ARGUMENT;
    *speed = (unsigned int)g.fan_pct;   /* every fan runs at the same speed */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNumFans(nvmlDevice_t device, unsigned int *numFans)
{
    BEGIN(FG_F_NumFans, numFans != NULL);
    if (fan_count(&g) == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *numFans = fan_count(&g);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    BEGIN(FG_F_PerformanceState, pState != NULL);
    *pState = (nvmlPstates_t)g.pstate;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    return nvmlDeviceGetPerformanceState(device, pState);
}

/* ---------------------------------------------------------------- clocks */

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    BEGIN(FG_F_ClockInfo, clock != NULL && type >= 0 && type < NVML_CLOCK_COUNT);
    if (g.clock_mhz[type] < 0)
        return NVML_ERROR_NOT_SUPPORTED;   /* -1: the dump had no value */
    *clock = (unsigned int)g.clock_mhz[type];
    /* running a kernel (the fake libcuda says so): graphics and SM clocks at their maximum,
     * or at half of it while gpu.N.perf.throttle_under_load holds them down */
    unsigned long long load = fg_load_reasons(idx);
    /* gpu.N.nvml.clock_stall_s: the first SM clock read under load stalls on the host, as a
     * caller descheduled that long would, and answers for the moment it returns (by then the
     * work queued before it may have ended, and the GPU idles) */
    static int stalled[FG_MAX_GPUS];
    if (load && type == NVML_CLOCK_SM && g.nvml_clock_stall_s > 0 && idx < FG_MAX_GPUS &&
        !__atomic_exchange_n(&stalled[idx], 1, __ATOMIC_SEQ_CST)) {
        fg_sleep(g.nvml_clock_stall_s);
        load = fg_load_reasons(idx);
    }
    if (load && (type == NVML_CLOCK_GRAPHICS || type == NVML_CLOCK_SM) && g.clock_max_mhz[type] > 0)
        *clock = (unsigned int)g.clock_max_mhz[type] / ((load & ~(1ULL << 63)) ? 2 : 1);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    BEGIN(FG_F_MaxClockInfo, clock != NULL && type >= 0 && type < NVML_CLOCK_COUNT);
    if (g.clock_max_mhz[type] < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *clock = (unsigned int)g.clock_max_mhz[type];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t clockType, nvmlClockId_t clockId,
                                unsigned int *clockMHz)
{
    BEGIN(FG_F_ClockInfo, clockMHz != NULL && clockType >= 0 && clockType < NVML_CLOCK_COUNT &&
                              clockId >= 0 && clockId < NVML_CLOCK_ID_COUNT);
    /* Application clocks are deprecated on current boards: not supported. */
    int v = clockId == NVML_CLOCK_ID_CURRENT ? g.clock_mhz[clockType]
            : clockId == NVML_CLOCK_ID_CUSTOMER_BOOST_MAX ? g.clock_max_mhz[clockType]
            : -1;
    if (v < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *clockMHz = (unsigned int)v;
    return NVML_SUCCESS;
}

/* ----------------------------------------------------------------- power */

/* 0 in power.default_limit_mw / power.enforced_limit_mw / power.max_limit_mw
 * means "the same as power_limit_mw". */
static unsigned int or_limit(const fg_gpu *g, unsigned int v)
{
    return v ? v : g->power_limit_mw;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    BEGIN(FG_F_PowerManagementLimit, limit != NULL);
    if (g.power_limit_mw == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *limit = g.power_limit_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    BEGIN(FG_F_EnforcedPowerLimit, limit != NULL);
    if (or_limit(&g, g.power_enforced_limit_mw) == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *limit = or_limit(&g, g.power_enforced_limit_mw);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device, unsigned int *defaultLimit)
{
    BEGIN(FG_F_PowerManagementDefaultLimit, defaultLimit != NULL);
    if (or_limit(&g, g.power_default_limit_mw) == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *defaultLimit = or_limit(&g, g.power_default_limit_mw);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *minLimit,
                                                          unsigned int *maxLimit)
{
    BEGIN(FG_F_PowerManagementLimitConstraints, minLimit != NULL && maxLimit != NULL);
    unsigned int max = or_limit(&g, g.power_max_limit_mw);
    if (max == 0 || g.power_min_limit_mw == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *minLimit = g.power_min_limit_mw;
    *maxLimit = max;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
    BEGIN(FG_F_TotalEnergyConsumption, energy != NULL);
    *energy = g.energy_mj;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------ modes and memory */

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
    BEGIN_MIG(FG_F_ComputeMode, mode != NULL);
    *mode = (nvmlComputeMode_t)g.compute_mode;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDriverModel_v2(nvmlDevice_t device, nvmlDriverModel_t *current, nvmlDriverModel_t *pending)
{
    BEGIN(FG_F_DriverModel, current != NULL && pending != NULL);
    if (g.driver_model < 0)
        return NVML_ERROR_NOT_SUPPORTED;   /* a Windows-only notion */
    *current = *pending = (nvmlDriverModel_t)g.driver_model;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDriverModel(nvmlDevice_t device, nvmlDriverModel_t *current, nvmlDriverModel_t *pending)
{
    return nvmlDeviceGetDriverModel_v2(device, current, pending);
}

nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory)
{
    BEGIN_MIG(FG_F_BAR1MemoryInfo, bar1Memory != NULL);
    if (mig >= 0 && g.mem_total_mib > 0) {
        /* A MIG device maps its share of the aperture, none of it in use. */
        g.bar1_total_mib = g.bar1_total_mib * fg_mig_memory_mib(&g) / g.mem_total_mib;
        g.bar1_used_mib = 0;
    }
    bar1Memory->bar1Total = g.bar1_total_mib * MIB;
    bar1Memory->bar1Used = g.bar1_used_mib * MIB;
    bar1Memory->bar1Free = g.bar1_total_mib > g.bar1_used_mib ? (g.bar1_total_mib - g.bar1_used_mib) * MIB : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    BEGIN(FG_F_VbiosVersion, version != NULL);
    return fg_put_string(version, length, g.vbios);
}

/*
 * NVLink traffic counters (KiB since the driver loaded), per link in scopeId, as nvitop and
 * its exporter poll them: an idle GPU whose counters stay at 0, on every link it has
 * (gpu.N.nvlink.links); a PCIe board (0 links) has none.
 */
int fg_monitor_field(const fg_gpu *g, nvmlFieldValue_t *v)
{
    switch (v->fieldId) {
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX:
        if ((g->unsupported >> FG_F_NvLinkState) & 1 || v->scopeId >= g->nvlink_links)
            return 0;
        fg_set_field(v, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 0);
        return 1;
    default:
        return 0;
    }
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter, unsigned int *value)
{
    BEGIN(FG_F_PcieThroughput, value != NULL && (counter == NVML_PCIE_UTIL_TX_BYTES ||
                                                  counter == NVML_PCIE_UTIL_RX_BYTES));
    *value = counter == NVML_PCIE_UTIL_TX_BYTES ? g.pcie_tx_kbps : g.pcie_rx_kbps;   /* KB/s */
    return NVML_SUCCESS;
}
