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
    double nvml_hang_s;

    int cuda_init_error, cuda_alloc_error, cuda_corrupt, cuda_crash;
    double cuda_hang_s;
} fg_gpu;

typedef struct {
    unsigned int ngpus;
    char driver_version[FG_DRIVER_LEN];
    int cuda_driver_version;
    int nvml_init_error;
    double nvml_init_hang_s;    /* nvmlInit* blocks this long */
    fg_gpu gpu[FG_MAX_GPUS];
} fg_scenario;

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

#pragma GCC visibility pop

#endif
