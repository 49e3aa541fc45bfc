/*
 * fakegpu NVML: the NVLink topology, each link's far end and which GPU pairs can copy peer to
 * peer, as the real library reports them.
 *
 * Scenario keys (see README.md): gpu.N.nvlink.L.remote = BUSID (gpu.N.nvlink.*.remote for
 * every link): link L of GPU N ends at that PCI address, a GPU's when one of the scenario's
 * GPUs has it.  A link with no remote set ends at an NVSwitch (the default: an HGX board),
 * one of four, at 0000:c0:00.0 to 0000:c3:00.0.  gpu.N.p2p.pcie = 1: PCIe peer to peer with
 * the other GPUs that have it.  A GPU with nvlink.links = 0 answers NOT_SUPPORTED for links.
 */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include <stdio.h>
#include <string.h>

#include "nvml_internal.h"

#define SWITCH_BUS 0xc0
#define SWITCHES 4
#define NVSWITCH_DEVICE_ID 0x22a310de   /* NVSwitch of HGX H100 (LS10) */

static unsigned int switch_of(const fg_gpu *g, unsigned int link)
{
    return link * SWITCHES / (g->nvlink_links ? g->nvlink_links : 1);
}

/* The GPU of the scenario at this address, or -1. */
static int gpu_at_key(unsigned long long key)
{
    for (unsigned int i = 0; i < fg_scn()->ngpus; i++)
        if ((FG_REMOTE_SET | fg_pci_key(&fg_scn()->gpu[i])) == key)
            return (int)i;
    return -1;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    BEGIN(FG_F_NvLinkState, pci != NULL);
    if (g.nvlink_links == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= g.nvlink_links || link >= FG_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    unsigned long long key = g.link_remote[link];
    if (key) {
        pci->domain = (unsigned int)((key >> 16) & 0xffffffffULL);
        pci->bus = (unsigned int)((key >> 8) & 0xff);
        pci->device = (unsigned int)(key & 0xff);
        int far = gpu_at_key(key);
        if (far >= 0)
            pci->pciDeviceId = fg_scn()->gpu[far].pci_device_id;
    } else {
        pci->bus = SWITCH_BUS + switch_of(&g, link);
        pci->pciDeviceId = NVSWITCH_DEVICE_ID;
    }
    snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, pci->domain, pci->bus, pci->device);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT,
             pci->domain & 0xffff, pci->bus, pci->device);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetNvLinkRemotePciInfo_v2(device, link, pci);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                 nvmlIntNvLinkDeviceType_t *type)
{
    BEGIN(FG_F_NvLinkState, type != NULL);
    if (g.nvlink_links == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= g.nvlink_links || link >= FG_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long key = g.link_remote[link];
    *type = !key ? NVML_NVLINK_DEVICE_TYPE_SWITCH
                 : gpu_at_key(key) >= 0 ? NVML_NVLINK_DEVICE_TYPE_GPU : NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
    return NVML_SUCCESS;
}

/* NVLINK: the two share links, directly or through the switches; READ, WRITE, ATOMICS: that,
 * or both have PCIe peer to peer; PCI: PCIe peer to peer alone. */
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device, nvmlDevice_t device2, nvmlGpuP2PCapsIndex_t index,
                                    nvmlGpuP2PStatus_t *status)
{
    BEGIN(-1, status != NULL);
    fg_gpu other;
    unsigned int b;
    nvmlReturn_t rc = fg_dev_begin(device2, -1, 1, &other, &b, NULL);
    if (rc != NVML_SUCCESS)
        return rc;
    int way = fg_p2p(fg_scn(), idx, b);
    int nvlink = way == FG_P2P_NVLINK || way == FG_P2P_SWITCH;
    switch (index) {
    case NVML_P2P_CAPS_INDEX_NVLINK:
        *status = nvlink ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
        break;
    case NVML_P2P_CAPS_INDEX_READ:
    case NVML_P2P_CAPS_INDEX_WRITE:
    case NVML_P2P_CAPS_INDEX_ATOMICS:
        *status = way != FG_P2P_NONE ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED;
        break;
    case NVML_P2P_CAPS_INDEX_PCI:
        *status = g.pcie_p2p && other.pcie_p2p ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED;
        break;
    default:
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

/* The link's NVLink version, by the GPU's architecture: Pascal 1.0, Volta 2.0, Ampere 3.0,
 * Hopper 4.0, Blackwell 5.0 (nvmlNvlinkVersion_t values 1, 2, 4, 6, 7). */
nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link, unsigned int *version)
{
    BEGIN(FG_F_NvLinkState, version != NULL);
    if (g.nvlink_links == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= g.nvlink_links || link >= FG_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    switch (g.arch) {
    case NVML_DEVICE_ARCH_PASCAL: *version = NVML_NVLINK_VERSION_1_0; break;
    case NVML_DEVICE_ARCH_VOLTA: *version = NVML_NVLINK_VERSION_2_0; break;
    case NVML_DEVICE_ARCH_AMPERE: *version = NVML_NVLINK_VERSION_3_0; break;
    case NVML_DEVICE_ARCH_HOPPER: *version = NVML_NVLINK_VERSION_4_0; break;
    case NVML_DEVICE_ARCH_BLACKWELL: *version = NVML_NVLINK_VERSION_5_0; break;
    default: return NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}
