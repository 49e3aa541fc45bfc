/*
 * fakegpu scenario: the description of the simulated GPUs that both fake
 * libraries (libnvidia-ml.so.1 and libcuda.so.1) serve.
 *
 * The scenario is a text file named by $FAKEGPU_SCENARIO, read at every
 * nvmlInit* / cuInit (see README.md for the format and every key).  This
 * header is compiled into both shared objects; everything in it is hidden
 * (not exported) so that the two libraries, loaded into one process, never
 * bind to each other's copy.
 */
#ifndef FAKEGPU_SCENARIO_H
#define FAKEGPU_SCENARIO_H

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

#define FG_MAX_GPUS 256          /* gpus = N accepts 0..256; gpu.N. accepts 0..255 */
#define FG_MAX_PROCS 64          /* entries in gpu.N.processes */
#define FG_NAME_LEN 96           /* == NVML_DEVICE_NAME_V2_BUFFER_SIZE */
#define FG_UUID_LEN 96           /* == NVML_DEVICE_UUID_V2_BUFFER_SIZE */
#define FG_SERIAL_LEN 30         /* == NVML_DEVICE_SERIAL_BUFFER_SIZE */
#define FG_DRIVER_LEN 80         /* == NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE */
#define FG_VBIOS_LEN 32          /* == NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE */
#define FG_MAX_MIG 7             /* gpu.N.mig.instances: at most 7 MIG devices per GPU */
#define FG_MAX_LINKS 36          /* == NVML_NVLINK_MAX_LINKS */
#define FG_MAX_STUCK 16          /* entries in gpu.N.mem.stuck_bits */
#define FG_MAX_PEER_RATES 16     /* entries of gpu.N.nvlink.peer.M.gbps */
#define FG_REMOTE_SET (1ULL << 63) /* link_remote: a far end is set (else an NVSwitch) */

/* NVML queries that gpu.N.unsupported can switch off, one bit each. */
enum fg_func {
    FG_F_Name, FG_F_UUID, FG_F_Serial, FG_F_PciInfo, FG_F_Index, FG_F_MinorNumber,
    FG_F_EccMode, FG_F_TotalEccErrors, FG_F_MemoryErrorCounter,
    FG_F_RetiredPages, FG_F_RetiredPagesPendingStatus, FG_F_RemappedRows,
    FG_F_MemoryInfo, FG_F_ComputeRunningProcesses, FG_F_GraphicsRunningProcesses,
    FG_F_Temperature, FG_F_TemperatureThreshold, FG_F_PowerUsage,
    FG_F_CurrentClocksEventReasons, FG_F_CurrPcieLinkGeneration, FG_F_CurrPcieLinkWidth,
    FG_F_MaxPcieLinkGeneration, FG_F_MaxPcieLinkWidth, FG_F_PersistenceMode,
    FG_F_MigMode, FG_F_FieldValues, FG_F_Architecture, FG_F_CudaComputeCapability,
    FG_F_Brand, FG_F_DisplayMode, FG_F_DisplayActive,
    /* monitoring calls (nvitop, gpustat, exporters) */
    FG_F_UtilizationRates, FG_F_EncoderUtilization, FG_F_DecoderUtilization,
    FG_F_FanSpeed, FG_F_NumFans, FG_F_PerformanceState, FG_F_ClockInfo, FG_F_MaxClockInfo,
    FG_F_PowerManagementLimit, FG_F_EnforcedPowerLimit, FG_F_PowerManagementDefaultLimit,
    FG_F_PowerManagementLimitConstraints, FG_F_ComputeMode, FG_F_DriverModel,
    FG_F_BAR1MemoryInfo, FG_F_VbiosVersion, FG_F_TotalEnergyConsumption,
    FG_F_ProcessUtilization, FG_F_PcieThroughput,
    FG_F_GpuRecoveryAction,             /* the field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION */
    FG_F_GpuFabricInfo, FG_F_RowRemapperHistogram, FG_F_PcieReplayCounter, FG_F_NvLinkState,
    FG_F_SramEccErrorStatus,
    FG_F_COUNT
};

/* ecc_mode values */
#define FG_ECC_DISABLED 0
#define FG_ECC_ENABLED 1
#define FG_ECC_UNSUPPORTED 2

typedef struct {
    unsigned int pid;
    unsigned long long mib;
} fg_proc;

typedef struct {
    char name[FG_NAME_LEN];
    char uuid[FG_UUID_LEN];             /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    unsigned char uuid_bytes[16];       /* the same 128 bits, for cuDeviceGetUuid */
    char serial[FG_SERIAL_LEN];
    unsigned int pci_domain, pci_bus, pci_device;  /* from pci_bus_id */
    unsigned int pci_device_id, pci_subsystem_id;
    unsigned int minor_number;

    int ecc_mode;                       /* FG_ECC_* */
    int ecc_pending;                    /* FG_ECC_ENABLED/DISABLED, -1 = same as ecc_mode */
    unsigned long long ecc_vol_corr, ecc_vol_unc, ecc_agg_corr, ecc_agg_unc;
    unsigned int retired_sbe, retired_dbe;
    int retired_pending;
    unsigned int remap_corr, remap_unc;
    int remap_pending, remap_failure;
    /* nvmlDeviceGetSramEccErrorStatus (Ampere+): the field-diagnostics threshold flag, and the
     * aggregate uncorrectable SRAM parity / SEC-DED counts it reports */
    int sram_threshold;
    unsigned long long sram_agg_unc_parity, sram_agg_unc_secded;
    unsigned int recovery_action;

    unsigned long long mem_total_mib, mem_used_mib, mem_reserved_mib;
    fg_proc procs[FG_MAX_PROCS];
    unsigned int nprocs;

    unsigned int temp_c, temp_slowdown_c, temp_shutdown_c;
    unsigned int power_mw;
    unsigned long long clocks_event_reasons;
    unsigned int pcie_gen_cur, pcie_gen_max, pcie_width_cur, pcie_width_max;
    int persistence_mode, mig_mode, lost;
    uint64_t unsupported;               /* bit (1 << enum fg_func) */
    uint64_t failing;                   /* same bits: these return failing_error */
    int failing_error;                  /* nvmlReturn_t; 0 = NVML_ERROR_TIMEOUT */
    double nvml_hang_s;
    double nvml_clock_stall_s;          /* the first SM clock read under load blocks this long */

    int cuda_init_error, cuda_alloc_error, cuda_corrupt, cuda_crash;
    double cuda_hang_s;
    double cuda_readback_s_per_gib;     /* real seconds each GiB of cuMemcpyDtoH takes */

    /* Identity and monitoring fields that nvitop, gpustat and exporters read
     * (gpu.N.architecture, utilization.*, pstate, clocks.*, ...; README.md). */
    unsigned int arch;                  /* NVML_DEVICE_ARCH_* value */
    unsigned int brand;                 /* nvmlBrandType_t value */
    unsigned int cc_major, cc_minor;
    int display_mode, display_active;
    int temp_gpu_max_c;                 /* NVML_TEMPERATURE_THRESHOLD_GPU_MAX; -1 = not supported */
    unsigned int util_gpu, util_mem, util_enc, util_dec;   /* percent */
    unsigned int pstate;                /* 0..15; 32 = unknown */
    int fan_pct;                        /* -1: no fan, FanSpeed is NOT_SUPPORTED */
    unsigned int fans;                  /* nvmlDeviceGetNumFans */
    unsigned int power_limit_mw, power_default_limit_mw, power_enforced_limit_mw;
    unsigned int power_min_limit_mw, power_max_limit_mw;
    unsigned long long energy_mj;
    int clock_mhz[4], clock_max_mhz[4]; /* nvmlClockType_t order: graphics, sm, mem, video; -1 = n/s */
    int compute_mode;                   /* nvmlComputeMode_t */
    int driver_model;                   /* nvmlDriverModel_t; -1 = not supported (Linux) */
    unsigned long long bar1_total_mib, bar1_used_mib;
    char vbios[FG_VBIOS_LEN];
    unsigned int pcie_tx_kbps, pcie_rx_kbps;
    fg_proc gprocs[FG_MAX_PROCS];       /* graphics processes (G; C+G are in both lists) */
    unsigned int ngprocs;
    unsigned int mig_instances;         /* MIG devices while mig_mode is on, 0..FG_MAX_MIG */
    unsigned long long mig_memory_mib;  /* memory of each; 0 = its share by profile */
    unsigned long long mig_used_mib;    /* memory in use on each */
    unsigned int mig_gi[FG_MAX_MIG];    /* GPU instance IDs; the first mig_ngi given, then k + 1 */
    unsigned int mig_ngi;
    /* NVLink, NVSwitch fabric, PCIe replays, HBM: served by nvml_fabric.c */
    unsigned int nvlink_links;          /* 0 = no NVLink (a PCIe board) */
    uint64_t nvlink_down;               /* bit L: link L inactive */
    unsigned long long nvlink_crc[FG_MAX_LINKS], nvlink_replay[FG_MAX_LINKS],
        nvlink_recovery[FG_MAX_LINKS];
    /* NVLink topology (nvml_topo.c, the fake libcuda's peers): each link's far end,
     * FG_REMOTE_SET | domain << 16 | bus << 8 | device; 0 = an NVSwitch (the default) */
    unsigned long long link_remote[FG_MAX_LINKS];
    unsigned int rate_peer[FG_MAX_PEER_RATES];    /* gpu.N.nvlink.peer.M.gbps: M, and ... */
    double rate_gbps[FG_MAX_PEER_RATES];          /* ... the copy rate from this GPU to M */
    unsigned int nrates;
    unsigned int pcie_p2p;              /* gpu.N.p2p.pcie: PCIe peer-to-peer with the others that have it */
    unsigned int fabric_state;          /* NVML_GPU_FABRIC_STATE_* */
    unsigned int fabric_status, fabric_clique_id, fabric_health_mask;
    int fabric_health_summary;          /* -1: derived from the mask */
    unsigned char fabric_cluster_uuid[16];
    unsigned int pcie_replay, mem_temp_c, mem_temp_max_c;
    unsigned int remap_hist[5];         /* max, high, partial, low, none */
    /* The deep level (cuda_deep.c): stuck memory bits and the speeds the fake's device timeline
     * follows, so a measured figure is what the scenario says. */
    unsigned long long stuck_addr[FG_MAX_STUCK];  /* byte offset in the GPU's memory */
    unsigned char stuck_bit[FG_MAX_STUCK], stuck_value[FG_MAX_STUCK];
    unsigned int nstuck;
    double hbm_gbps, h2d_gbps, d2h_gbps, gflops, peer_gbps;
    unsigned long long throttle_under_load;       /* clocks event reasons while a kernel runs */
    unsigned int sm_count;                        /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
    double throttle_after_s;        /* throttle_under_load shows after this long under load */
    unsigned int compute_wrong;     /* wrong elements in every compute kernel's output */
    unsigned int dbe_under_test;    /* uncorrectable ECC errors the memory test provokes */
    double tensor_gflops;           /* the tensor-core GEMM (hc_mma_*), GFLOP/s */
    unsigned int max_threads_per_sm;  /* cuOccupancyMaxActiveBlocksPerMultiprocessor */
    /* read by the fake nvidia-smi only (nvidia_smi.c) */
    int reset_fails;                    /* gpu.N.reset.fails: --gpu-reset fails on this GPU */
    int fault_recurs;                   /* gpu.N.fault.recurs: a reset does not clear its faults */
} fg_gpu;

typedef struct {
    unsigned int ngpus;
    char driver_version[FG_DRIVER_LEN];
    int cuda_driver_version;
    int nvml_init_error;
    double nvml_init_hang_s;    /* nvmlInit* blocks this long */
    char kernel_log[4096];      /* kernel_log: where the fake nvidia-smi writes the driver's lines */
    char launch_log[4096];      /* cuda.launch_log: each kernel launch appends a line here */
    double smi_reset_hang_s;    /* nvidia_smi.reset_hang_s: nvidia-smi --gpu-reset blocks this long */
    double smi_pm_on_hang_s;    /* nvidia_smi.pm_on_hang_s: nvidia-smi -pm 1 blocks this long */
    double cuda_pause_on_stall_s; /* cuda.pause_on_stall_s: a host stall longer than this stops the device clock */
    /* gpu[0..nfilled-1] hold their defaults and every gpu.* line; a GPU
     * past that (never enumerated: nfilled >= ngpus once parsed) gets its
     * defaults when a gpu.N line names it (filled[N]).  The array is 0.9 MiB:
     * filling all 256 entries on every nvmlInit and cuInit cost each CUDA
     * probe child ~220 of its ~1,040 page faults, a cost no real driver has. */
    unsigned int nfilled;
    unsigned char filled[FG_MAX_GPUS];
    fg_gpu gpu[FG_MAX_GPUS];
} fg_scenario;

/* The topology both fakes answer from (scenario.c): active links from GPU a whose far end is
 * GPU b; active links of a GPU to an NVSwitch; and how a can reach b peer to peer:
 * FG_P2P_NVLINK (direct links), FG_P2P_SWITCH (both on the NVSwitch fabric), FG_P2P_PCIE
 * (both have p2p.pcie), FG_P2P_NONE.  And the copy rate from a to b in GB/s (0: the default). */
enum { FG_P2P_NONE, FG_P2P_NVLINK, FG_P2P_SWITCH, FG_P2P_PCIE };
unsigned int fg_links_between(const fg_scenario *s, unsigned int a, unsigned int b);
unsigned int fg_switch_links(const fg_gpu *g);
int fg_p2p(const fg_scenario *s, unsigned int a, unsigned int b);
double fg_peer_rate(const fg_gpu *g, unsigned int b);
unsigned long long fg_pci_key(const fg_gpu *g);

/*
 * Fill *s from $FAKEGPU_SCENARIO (defaults only when it is unset).
 * Returns 0 on success; on any error prints one line
 * "fakegpu: PATH:LINE: what" to stderr and returns -1, and *s must not be
 * used (it may be half-filled: callers load into a scratch copy).
 */
int fg_scenario_load(fg_scenario *s);

/* Parse scenario text (for the loader; `path` only labels messages). */
int fg_scenario_parse(fg_scenario *s, const char *text, size_t len, const char *path);

/* Fill *s with the defaults: a healthy 8-GPU H100 node. */
void fg_scenario_defaults(fg_scenario *s);

/* Block the calling thread for `seconds` (nanosleep, restarted on EINTR). */
void fg_sleep(double seconds);

/* Name of an fg_func bit as used in gpu.N.unsupported. */
const char *fg_func_name(int f);

/*
 * MIG devices, the same for NVML and CUDA.  MIG device k (0-based) of GPU g
 * exists when g->mig_mode is on and k < g->mig_instances.  Its UUID is
 * "MIG-" + 8-4-4-4-12 hex derived from the GPU's UUID and k; its GPU
 * instance ID is k + 1 (or gpu.N.mig.gpu_instance_ids) and its compute
 * instance ID 0.  With K instances
 * each gets the profile of K equal A100/H100 slices: 7g (K=1), 3g (2),
 * 2g (3), 1g (4..7), with 8/8, 4/8, 2/8 or 1/8 of the GPU's memory
 * (gpu.N.mig.memory_mib sets the memory of each instead).
 */
void fg_mig_uuid(const fg_gpu *g, unsigned int k, unsigned char bytes[16], char *text, size_t cap);
unsigned long long fg_mig_memory_mib(const fg_gpu *g);
/* GPU instance ID of MIG device k (gpu.N.mig.gpu_instance_ids, else k + 1). */
unsigned int fg_mig_gi(const fg_gpu *g, unsigned int k);
/* "<GPU name> MIG <s>g.<m>gb", as NVML names a MIG device. */
void fg_mig_name(const fg_gpu *g, char *text, size_t cap);

#pragma GCC visibility pop

#endif
