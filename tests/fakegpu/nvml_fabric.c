/*
 * fakegpu NVML: NVLink, the NVSwitch fabric, PCIe replays, HBM temperature
 * and the row-remapper histogram of today's data-centre GPUs.
 *
 * Scenario keys (see README.md): gpu.N.nvlink.links, gpu.N.nvlink.down,
 * gpu.N.nvlink.L.crc_errors / .replay_errors / .recovery_errors,
 * gpu.N.fabric.state / .status / .clique_id / .cluster_uuid / .health_mask,
 * gpu.N.pcie.replay, gpu.N.memory_temperature_c, gpu.N.memory_temperature.max_c,
 * gpu.N.remap.histogram.  A GPU with nvlink.links = 0 is a PCIe board: every
 * NVLink query on it answers NOT_SUPPORTED, as the real library does.
 */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include <string.h>

#include "nvml_internal.h"

static int link_ok(const fg_gpu *g, unsigned int link)
{
    return g->nvlink_links > 0 && link < g->nvlink_links && link < FG_MAX_LINKS;
}

int fg_fabric_field(const fg_gpu *g, nvmlFieldValue_t *v)
{
    const nvmlValueType_t U = NVML_VALUE_TYPE_UNSIGNED_INT, ULL = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    unsigned int link = v->scopeId;
    int nvlink = !((g->unsupported >> FG_F_NvLinkState) & 1);
    switch (v->fieldId) {
    case NVML_FI_DEV_MEMORY_TEMP:
        if ((g->unsupported >> FG_F_Temperature) & 1 || g->mem_temp_c == 0)
            return 0;
        fg_set_field(v, U, g->mem_temp_c);
        return 1;
    case NVML_FI_DEV_PCIE_REPLAY_COUNTER:
        if ((g->unsupported >> FG_F_PcieReplayCounter) & 1)
            return 0;
        fg_set_field(v, U, g->pcie_replay);
        return 1;
    case NVML_FI_DEV_NVLINK_LINK_COUNT:
        if (!nvlink || g->nvlink_links == 0)
            return 0;
        fg_set_field(v, U, g->nvlink_links);
        return 1;
    case NVML_FI_DEV_NVLINK_GET_STATE:
        if (!nvlink || !link_ok(g, link))
            return 0;
        fg_set_field(v, U, (g->nvlink_down >> link) & 1 ? NVML_NVLINK_STATE_INACTIVE : NVML_NVLINK_STATE_ACTIVE);
        return 1;
    case NVML_FI_DEV_NVLINK_ERROR_DL_CRC:
        if (!nvlink || !link_ok(g, link))
            return 0;
        fg_set_field(v, ULL, g->nvlink_crc[link]);
        return 1;
    case NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY:
        if (!nvlink || !link_ok(g, link))
            return 0;
        fg_set_field(v, ULL, g->nvlink_replay[link]);
        return 1;
    case NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY:
        if (!nvlink || !link_ok(g, link))
            return 0;
        fg_set_field(v, ULL, g->nvlink_recovery[link]);
        return 1;
    default:
        return 0;
    }
}

static void fill_fabric(const fg_gpu *g, unsigned char uuid[NVML_GPU_FABRIC_UUID_LEN],
                        nvmlReturn_t *status, unsigned int *clique, nvmlGpuFabricState_t *state)
{
    memcpy(uuid, g->fabric_cluster_uuid, NVML_GPU_FABRIC_UUID_LEN);
    *status = (nvmlReturn_t)g->fabric_status;
    *clique = g->fabric_clique_id;
    *state = (nvmlGpuFabricState_t)g->fabric_state;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info)
{
    BEGIN(FG_F_GpuFabricInfo, info != NULL);
    if (g.fabric_state == NVML_GPU_FABRIC_STATE_NOT_SUPPORTED)
        return NVML_ERROR_NOT_SUPPORTED;
    fill_fabric(&g, info->clusterUuid, &info->status, &info->cliqueId, &info->state);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *info)
{
    BEGIN(FG_F_GpuFabricInfo, info != NULL);
    /* v2 (pynvml's c_nvmlGpuFabricInfoV_t) and v3 share their first fields; v3 adds the
     * health summary.  Any other version is a caller bug, as in the real library. */
    if (info->version != nvmlGpuFabricInfo_v2 && info->version != nvmlGpuFabricInfo_v3)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (g.fabric_state == NVML_GPU_FABRIC_STATE_NOT_SUPPORTED)
        return NVML_ERROR_NOT_SUPPORTED;
    fill_fabric(&g, info->clusterUuid, &info->status, &info->cliqueId, &info->state);
    info->healthMask = g.fabric_health_mask;
    if (info->version == nvmlGpuFabricInfo_v3) {
        int unhealthy = NVML_GPU_FABRIC_HEALTH_TEST(g.fabric_health_mask, _ROUTE_UNHEALTHY, _TRUE) ||
                        NVML_GPU_FABRIC_HEALTH_TEST(g.fabric_health_mask, _DEGRADED_BW, _TRUE);
        info->healthSummary = g.fabric_health_summary >= 0 ? (unsigned char)g.fabric_health_summary
                              : unhealthy ? NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY
                                          : NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY;
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRowRemapperHistogram(nvmlDevice_t device, nvmlRowRemapperHistogramValues_t *values)
{
    BEGIN(FG_F_RowRemapperHistogram, values != NULL);
    if ((g.unsupported >> FG_F_RemappedRows) & 1 || g.mig_mode)
        return NVML_ERROR_NOT_SUPPORTED;
    values->max = g.remap_hist[0];
    values->high = g.remap_hist[1];
    values->partial = g.remap_hist[2];
    values->low = g.remap_hist[3];
    values->none = g.remap_hist[4];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value)
{
    BEGIN(FG_F_PcieReplayCounter, value != NULL);
    *value = g.pcie_replay;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive)
{
    BEGIN(FG_F_NvLinkState, isActive != NULL);
    if (g.nvlink_links == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!link_ok(&g, link))
        return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = (g.nvlink_down >> link) & 1 ? NVML_FEATURE_DISABLED : NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link,
                                             nvmlNvLinkErrorCounter_t counter, unsigned long long *value)
{
    BEGIN(FG_F_NvLinkState, value != NULL);
    if (g.nvlink_links == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!link_ok(&g, link))
        return NVML_ERROR_INVALID_ARGUMENT;
    switch (counter) {
    case NVML_NVLINK_ERROR_DL_REPLAY: *value = g.nvlink_replay[link]; return NVML_SUCCESS;
    case NVML_NVLINK_ERROR_DL_RECOVERY: *value = g.nvlink_recovery[link]; return NVML_SUCCESS;
    case NVML_NVLINK_ERROR_DL_CRC_FLIT: *value = g.nvlink_crc[link]; return NVML_SUCCESS;
    case NVML_NVLINK_ERROR_DL_CRC_DATA: *value = 0; return NVML_SUCCESS;
    default: return NVML_ERROR_NOT_SUPPORTED;
    }
}
