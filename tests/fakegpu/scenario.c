/*
 * fakegpu scenario parser, shared by the fake NVML and the fake CUDA driver.
 *
 * Design rules (see README.md):
 *   - one "key = value" per line, '#' starts a comment, blank lines are fine;
 *   - lines are applied in file order, so a later line wins whether it is a
 *     wildcard (gpu.*.KEY) or a specific GPU (gpu.N.KEY);
 *   - anything malformed fails the whole load with one message naming the
 *     file and line: a test must never run against a half-read scenario.
 */
#define _GNU_SOURCE
#include "scenario.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const func_names[FG_F_COUNT] = {
    [FG_F_Name] = "Name",
    [FG_F_UUID] = "UUID",
    [FG_F_Serial] = "Serial",
    [FG_F_PciInfo] = "PciInfo",
    [FG_F_Index] = "Index",
    [FG_F_MinorNumber] = "MinorNumber",
    [FG_F_EccMode] = "EccMode",
    [FG_F_TotalEccErrors] = "TotalEccErrors",
    [FG_F_MemoryErrorCounter] = "MemoryErrorCounter",
    [FG_F_RetiredPages] = "RetiredPages",
    [FG_F_RetiredPagesPendingStatus] = "RetiredPagesPendingStatus",
    [FG_F_RemappedRows] = "RemappedRows",
    [FG_F_MemoryInfo] = "MemoryInfo",
    [FG_F_ComputeRunningProcesses] = "ComputeRunningProcesses",
    [FG_F_GraphicsRunningProcesses] = "GraphicsRunningProcesses",
    [FG_F_Temperature] = "Temperature",
    [FG_F_TemperatureThreshold] = "TemperatureThreshold",
    [FG_F_PowerUsage] = "PowerUsage",
    [FG_F_CurrentClocksEventReasons] = "CurrentClocksEventReasons",
    [FG_F_CurrPcieLinkGeneration] = "CurrPcieLinkGeneration",
    [FG_F_CurrPcieLinkWidth] = "CurrPcieLinkWidth",
    [FG_F_MaxPcieLinkGeneration] = "MaxPcieLinkGeneration",
    [FG_F_MaxPcieLinkWidth] = "MaxPcieLinkWidth",
    [FG_F_PersistenceMode] = "PersistenceMode",
    [FG_F_MigMode] = "MigMode",
    [FG_F_FieldValues] = "FieldValues",
    [FG_F_Architecture] = "Architecture",
    [FG_F_CudaComputeCapability] = "CudaComputeCapability",
    [FG_F_Brand] = "Brand",
    [FG_F_DisplayMode] = "DisplayMode",
    [FG_F_DisplayActive] = "DisplayActive",
    [FG_F_UtilizationRates] = "UtilizationRates",
    [FG_F_EncoderUtilization] = "EncoderUtilization",
    [FG_F_DecoderUtilization] = "DecoderUtilization",
    [FG_F_FanSpeed] = "FanSpeed",
    [FG_F_NumFans] = "NumFans",
    [FG_F_PerformanceState] = "PerformanceState",
    [FG_F_ClockInfo] = "ClockInfo",
    [FG_F_MaxClockInfo] = "MaxClockInfo",
    [FG_F_PowerManagementLimit] = "PowerManagementLimit",
    [FG_F_EnforcedPowerLimit] = "EnforcedPowerLimit",
    [FG_F_PowerManagementDefaultLimit] = "PowerManagementDefaultLimit",
    [FG_F_PowerManagementLimitConstraints] = "PowerManagementLimitConstraints",
    [FG_F_ComputeMode] = "ComputeMode",
    [FG_F_DriverModel] = "DriverModel",
    [FG_F_BAR1MemoryInfo] = "BAR1MemoryInfo",
    [FG_F_VbiosVersion] = "VbiosVersion",
    [FG_F_TotalEnergyConsumption] = "TotalEnergyConsumption",
    [FG_F_ProcessUtilization] = "ProcessUtilization",
    [FG_F_PcieThroughput] = "PcieThroughput",
    [FG_F_GpuRecoveryAction] = "GpuRecoveryAction",
    [FG_F_GpuFabricInfo] = "GpuFabricInfo",
    [FG_F_RowRemapperHistogram] = "RowRemapperHistogram",
    [FG_F_PcieReplayCounter] = "PcieReplayCounter",
    [FG_F_NvLinkState] = "NvLinkState",
    [FG_F_SramEccErrorStatus] = "SramEccErrorStatus",
};

const char *fg_func_name(int f)
{
    return (f >= 0 && f < FG_F_COUNT) ? func_names[f] : "?";
}

/* Accepted aliases: names of functions that share a bit with another. */
static int func_lookup(const char *name, size_t len)
{
    static const struct { const char *alias; int f; } aliases[] = {
        {"CurrentClocksThrottleReasons", FG_F_CurrentClocksEventReasons},
        {"TemperatureV", FG_F_Temperature},
        {"Uuid", FG_F_UUID},
        {"PowerState", FG_F_PerformanceState},
        {"Clock", FG_F_ClockInfo},
        {"GpuFabricInfoV", FG_F_GpuFabricInfo},
    };
    for (int f = 0; f < FG_F_COUNT; f++)
        if (strlen(func_names[f]) == len && memcmp(func_names[f], name, len) == 0)
            return f;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strlen(aliases[i].alias) == len && memcmp(aliases[i].alias, name, len) == 0)
            return aliases[i].f;
    return -1;
}

void fg_sleep(double seconds)
{
    if (!(seconds > 0))
        return;
    struct timespec req;
    req.tv_sec = (time_t)seconds;
    req.tv_nsec = (long)((seconds - (double)req.tv_sec) * 1e9);
    if (req.tv_nsec >= 1000000000L)
        req.tv_nsec = 999999999L;
    /* A signal interrupting nanosleep must not shorten the hang: resume with
     * the remaining time until it has all passed. */
    struct timespec rem;
    while (nanosleep(&req, &rem) != 0 && errno == EINTR)
        req = rem;
}

/* Deterministic defaults for GPU n: unique UUID, serial and PCI address. */
static void gpu_defaults(fg_gpu *g, unsigned int n)
{
    memset(g, 0, sizeof *g);
    snprintf(g->name, sizeof g->name, "NVIDIA H100 80GB HBM3");
    snprintf(g->uuid, sizeof g->uuid, "GPU-fa4e0000-0000-4000-8000-%012x", n);
    static const unsigned char base[16] = {0xfa, 0x4e, 0, 0, 0, 0, 0x40, 0, 0x80, 0};
    memcpy(g->uuid_bytes, base, sizeof base);
    g->uuid_bytes[14] = (unsigned char)(n >> 8);
    g->uuid_bytes[15] = (unsigned char)(n & 0xff);
    snprintf(g->serial, sizeof g->serial, "16505220038%02u", n);
    /* Sixteen GPUs per PCI domain, buses 0x18, 0x28, ... 0xF8, 0x08: unique. */
    g->pci_domain = n / 16;
    g->pci_bus = (0x18 + (n % 16) * 0x10) & 0xff;
    g->pci_device = 0;
    g->pci_device_id = 0x233010de;     /* H100 SXM5 80GB */
    g->pci_subsystem_id = 0x16c110de;
    g->minor_number = n;
    g->ecc_mode = FG_ECC_ENABLED;
    g->ecc_pending = -1;
    g->mem_total_mib = 81559;
    g->mem_used_mib = 4;
    g->mem_reserved_mib = 0;
    g->temp_c = 34;
    g->temp_slowdown_c = 87;
    g->temp_shutdown_c = 92;
    g->power_mw = 70000;
    g->pcie_gen_cur = g->pcie_gen_max = 5;
    g->pcie_width_cur = g->pcie_width_max = 16;
    g->persistence_mode = 1;
    /* What an idle H100 SXM5 reports (nvidia-smi -q of a real one, 535.183.01). */
    g->arch = 9;                        /* NVML_DEVICE_ARCH_HOPPER */
    g->brand = 14;                      /* NVML_BRAND_NVIDIA */
    g->cc_major = 9;
    g->cc_minor = 0;
    g->temp_gpu_max_c = 85;
    g->fan_pct = -1;                    /* passively cooled */
    g->power_limit_mw = 700000;
    g->power_min_limit_mw = 200000;
    static const int clk[4] = {345, 345, 2619, 765}, clk_max[4] = {1980, 1980, 2619, 1545};
    memcpy(g->clock_mhz, clk, sizeof clk);
    memcpy(g->clock_max_mhz, clk_max, sizeof clk_max);
    g->driver_model = -1;               /* Windows only */
    g->bar1_total_mib = 131072;
    g->bar1_used_mib = 1;
    snprintf(g->vbios, sizeof g->vbios, "96.00.74.00.01");
    /* An HGX H100 on NVSwitch: 18 active links, fabric registered, HBM cool, every bank with
     * its full remap availability (2560 banks, as a real H100 80GB reports). */
    g->nvlink_links = 18;
    g->fabric_state = 3;                /* NVML_GPU_FABRIC_STATE_COMPLETED */
    g->fabric_clique_id = 32766;
    g->fabric_health_summary = -1;
    static const unsigned char cluster[16] = {0xc1, 0x05, 0x7e, 0x40, 0, 0, 0x40, 0, 0x80};
    memcpy(g->fabric_cluster_uuid, cluster, sizeof cluster);
    g->mem_temp_c = 40;
    g->mem_temp_max_c = 95;
    g->remap_hist[0] = 2560;
    /* Speeds of a healthy H100 SXM5 as a simple kernel measures them (below the datasheet's
     * peaks: 3.35 TB/s HBM3, 67 TFLOPS FP32, 450 GB/s NVLink per direction, 64 GB/s PCIe 5.0
     * x16 per direction). */
    g->hbm_gbps = 3000.0;
    g->h2d_gbps = g->d2h_gbps = 50.0;
    g->gflops = 55000.0;
    g->peer_gbps = 370.0;
    g->sm_count = 132;
    g->tensor_gflops = 600000.0;    /* mma.sync BF16 on an H100 SXM: below the 989 TFLOPS dense peak */
    g->max_threads_per_sm = 2048;
}

/* ------------------------------------------------------------- MIG devices */

void fg_mig_uuid(const fg_gpu *g, unsigned int k, unsigned char bytes[16], char *text, size_t cap)
{
    /* A fixed mix of the GPU's UUID and k: distinct per instance, stable
     * across runs, and never equal to the GPU's own UUID. */
    for (int i = 0; i < 16; i++)
        bytes[i] = (unsigned char)(g->uuid_bytes[i] ^ (0x5a + 0x11 * (k + 1) + 7 * i));
    bytes[6] = (unsigned char)((bytes[6] & 0x0f) | 0x50);
    snprintf(text, cap,
             "MIG-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
             bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]);
}

/* Compute slices and memory eighths of one of K equal instances. */
static void mig_profile(const fg_gpu *g, unsigned int *slices, unsigned int *eighths)
{
    unsigned int k = g->mig_instances ? g->mig_instances : 1;
    *slices = k == 1 ? 7 : k == 2 ? 3 : k == 3 ? 2 : 1;
    *eighths = k == 1 ? 8 : k == 2 ? 4 : k == 3 ? 2 : 1;
}

unsigned int fg_mig_gi(const fg_gpu *g, unsigned int k)
{
    return k < g->mig_ngi ? g->mig_gi[k] : k + 1;
}

unsigned long long fg_mig_memory_mib(const fg_gpu *g)
{
    unsigned int slices, eighths;
    mig_profile(g, &slices, &eighths);
    return g->mig_memory_mib ? g->mig_memory_mib : g->mem_total_mib * eighths / 8;
}

void fg_mig_name(const fg_gpu *g, char *text, size_t cap)
{
    unsigned int slices, eighths;
    mig_profile(g, &slices, &eighths);
    unsigned long long gb = (fg_mig_memory_mib(g) + 512) / 1024;
    snprintf(text, cap, "%.60s MIG %ug.%llugb", g->name, slices, gb);
}

/* Defaults for GPUs 0..nfill-1 (the others are filled when a line names one). */
static void scenario_defaults(fg_scenario *s, unsigned int nfill)
{
    s->ngpus = 8;
    snprintf(s->driver_version, sizeof s->driver_version, "550.54.15");
    s->cuda_driver_version = 12040;
    s->nvml_init_error = 0;
    s->nvml_init_hang_s = 0;
    s->kernel_log[0] = '\0';
    s->launch_log[0] = '\0';
    s->smi_reset_hang_s = 0;
    s->cuda_pause_on_stall_s = 0;
    s->smi_pm_on_hang_s = 0;
    s->nfilled = nfill;
    memset(s->filled, 0, sizeof s->filled);
    for (unsigned int n = 0; n < nfill; n++) {
        gpu_defaults(&s->gpu[n], n);
        s->filled[n] = 1;
    }
}

void fg_scenario_defaults(fg_scenario *s)
{
    scenario_defaults(s, 8);
}

/* GPU n, with its defaults if no line has named it yet. */
static fg_gpu *gpu_at(fg_scenario *s, unsigned int n)
{
    if (!s->filled[n]) {
        gpu_defaults(&s->gpu[n], n);
        s->filled[n] = 1;
    }
    return &s->gpu[n];
}

/* ---------------------------------------------------------------- values */

/* Errors are reported through this buffer, then printed with file:line. */
typedef struct {
    char msg[256];
} perr;

static int fail(perr *e, const char *fmt, const char *arg)
{
    snprintf(e->msg, sizeof e->msg, fmt, arg);
    return -1;
}

/* Integer in [lo, hi]: decimal, or hexadecimal with 0x.  No octal: "010"
 * is ten, as a person writing a scenario means. */
static int parse_ll(const char *v, long long lo, long long hi, long long *out, perr *e)
{
    const char *p = v;
    int neg = 0;
    if (*p == '-' || *p == '+') {
        neg = (*p == '-');
        p++;
    }
    int base = 10;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        base = 16;
        p += 2;
    }
    if (!isxdigit((unsigned char)*p) || (base == 10 && !isdigit((unsigned char)*p)))
        return fail(e, "bad integer '%s'", v);
    errno = 0;
    char *end;
    unsigned long long u = strtoull(p, &end, base);
    if (*end != '\0' || errno == ERANGE)
        return fail(e, "bad integer '%s'", v);
    if (u > (unsigned long long)LLONG_MAX)
        return fail(e, "integer out of range '%s'", v);
    long long x = neg ? -(long long)u : (long long)u;
    if (x < lo || x > hi)
        return fail(e, "integer out of range '%s'", v);
    *out = x;
    return 0;
}

static int parse_bool(const char *v, int *out, perr *e)
{
    if (strcmp(v, "0") == 0) {
        *out = 0;
        return 0;
    }
    if (strcmp(v, "1") == 0) {
        *out = 1;
        return 0;
    }
    return fail(e, "bad boolean '%s' (expected 0 or 1)", v);
}

static int parse_seconds(const char *v, double *out, perr *e)
{
    if (*v == '\0')
        return fail(e, "bad number '%s'", v);
    errno = 0;
    char *end;
    double d = strtod(v, &end);
    if (*end != '\0' || errno == ERANGE || !isfinite(d) || d < 0 || d > 86400.0)
        return fail(e, "bad number of seconds '%s' (0..86400)", v);
    *out = d;
    return 0;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* "GPU-" then 8-4-4-4-12 hex digits: CUDA needs the 16 raw bytes. */
static int parse_uuid(const char *v, fg_gpu *g, perr *e)
{
    static const int groups[5] = {8, 4, 4, 4, 12};
    if (strncmp(v, "GPU-", 4) != 0)
        return fail(e, "bad uuid '%s' (expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", v);
    const char *p = v + 4;
    unsigned char b[16];
    int nib = 0;
    for (int gi = 0; gi < 5; gi++) {
        for (int k = 0; k < groups[gi]; k++, p++, nib++) {
            int h = hexval((unsigned char)*p);
            if (h < 0)
                return fail(e, "bad uuid '%s' (expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", v);
            if (nib % 2 == 0)
                b[nib / 2] = (unsigned char)(h << 4);
            else
                b[nib / 2] = (unsigned char)(b[nib / 2] | h);
        }
        if (gi < 4 && *p++ != '-')
            return fail(e, "bad uuid '%s' (expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", v);
    }
    if (*p != '\0')
        return fail(e, "bad uuid '%s' (expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", v);
    snprintf(g->uuid, sizeof g->uuid, "%s", v);
    memcpy(g->uuid_bytes, b, sizeof b);
    return 0;
}

/* Parse up to `maxdigits` hex digits terminated by `term`. */
static int hexfield(const char **pp, int mindigits, int maxdigits, char term, unsigned int *out)
{
    const char *p = *pp;
    unsigned int x = 0;
    int n = 0;
    while (hexval((unsigned char)*p) >= 0) {
        if (++n > maxdigits)
            return -1;
        x = x * 16 + (unsigned int)hexval((unsigned char)*p);
        p++;
    }
    if (n < mindigits || *p != term)
        return -1;
    *out = x;
    *pp = term ? p + 1 : p;
    return 0;
}

/* "DDDDDDDD:BB:DD.F" or the legacy "DDDD:BB:DD.F"; function must be 0. */
static int parse_pci(const char *v, fg_gpu *g, perr *e)
{
    const char *p = v;
    unsigned int dom, bus, dev, fn;
    if (hexfield(&p, 4, 8, ':', &dom) || hexfield(&p, 2, 2, ':', &bus) ||
        hexfield(&p, 2, 2, '.', &dev) || hexfield(&p, 1, 1, '\0', &fn) || dev > 31 || fn != 0)
        return fail(e, "bad pci_bus_id '%s' (expected DDDDDDDD:BB:DD.0)", v);
    g->pci_domain = dom;
    g->pci_bus = bus;
    g->pci_device = dev;
    return 0;
}

static int parse_procs(const char *v, fg_proc *dst, unsigned int *count, perr *e)
{
    fg_proc procs[FG_MAX_PROCS];
    unsigned int n = 0;
    const char *p = v;
    while (*p) {
        if (n == FG_MAX_PROCS)
            return fail(e, "too many processes (at most 64) in '%s'", v);
        char *end;
        if (!isdigit((unsigned char)*p))
            return fail(e, "bad processes '%s' (expected PID:MIB[,PID:MIB...])", v);
        errno = 0;
        unsigned long pid = strtoul(p, &end, 10);
        if (errno || *end != ':' || pid > UINT_MAX)
            return fail(e, "bad processes '%s' (expected PID:MIB[,PID:MIB...])", v);
        p = end + 1;
        if (!isdigit((unsigned char)*p))
            return fail(e, "bad processes '%s' (expected PID:MIB[,PID:MIB...])", v);
        unsigned long long mib = strtoull(p, &end, 10);
        if (errno || (*end != ',' && *end != '\0') || mib > (1ULL << 30))
            return fail(e, "bad processes '%s' (expected PID:MIB[,PID:MIB...])", v);
        procs[n].pid = (unsigned int)pid;
        procs[n].mib = mib;
        n++;
        p = end;
        if (*p == ',') {
            p++;
            while (*p == ' ' || *p == '\t')
                p++;
            if (*p == '\0')
                return fail(e, "bad processes '%s' (trailing comma)", v);
        }
    }
    memcpy(dst, procs, n * sizeof procs[0]);
    *count = n;
    return 0;
}

static int parse_unsupported(const char *v, uint64_t *dst, perr *e)
{
    uint64_t mask = 0;
    const char *p = v;
    while (*p) {
        while (*p == ' ' || *p == '\t')
            p++;
        const char *start = p;
        while (*p && *p != ',' && *p != ' ' && *p != '\t')
            p++;
        size_t len = (size_t)(p - start);
        while (*p == ' ' || *p == '\t')
            p++;
        if (len == 0)
            return fail(e, "empty name in unsupported list '%s'", v);
        int f = func_lookup(start, len);
        if (f < 0) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(len < 60 ? len : 60), start);
            return fail(e, "unknown NVML function name '%s' in unsupported list", name);
        }
        mask |= (uint64_t)1 << f;
        if (*p == ',') {
            p++;
            if (*p == '\0')
                return fail(e, "bad unsupported list '%s' (trailing comma)", v);
        } else if (*p) {
            return fail(e, "bad unsupported list '%s'", v);
        }
    }
    *dst = mask;
    return 0;
}

static int parse_string(const char *v, char *dst, size_t cap, perr *e)
{
    if (strlen(v) >= cap) {
        char m[80];
        snprintf(m, sizeof m, "value too long (at most %zu characters)", cap - 1);
        return fail(e, "%s", m);
    }
    memcpy(dst, v, strlen(v) + 1);
    return 0;
}

/* ------------------------------------------------------------ key table */

enum ktype { K_STR, K_U32, K_U64, K_INT, K_BOOL, K_SECONDS, K_ECC, K_ECC_PENDING,
             K_PROCS, K_UNSUP, K_UUID, K_PCI, K_GPROCS, K_ENUM, K_CC, K_GI_IDS, K_LINKS,
             K_FABRIC, K_FUUID, K_HIST, K_STUCK, K_GBPS, K_REASONS };

/* Named values of the K_ENUM keys, the numbers nvml.h gives them (gkey.cap
 * picks the table). */
typedef struct {
    const char *name;
    long long value;
} enum_name;
enum { E_ARCH, E_BRAND, E_COMPUTE_MODE, E_DRIVER_MODEL };
static const enum_name arch_names[] = {
    {"kepler", 2}, {"maxwell", 3}, {"pascal", 4}, {"volta", 5}, {"turing", 6}, {"ampere", 7},
    {"ada", 8}, {"hopper", 9}, {"blackwell", 10}, {"rubin", 13}, {"unknown", 0xffffffffLL}, {NULL, 0}};
static const enum_name brand_names[] = {
    {"unknown", 0}, {"quadro", 1}, {"tesla", 2}, {"nvs", 3}, {"grid", 4}, {"geforce", 5},
    {"titan", 6}, {"nvidia_vapps", 7}, {"nvidia_vpc", 8}, {"nvidia_vcs", 9}, {"nvidia_vws", 10},
    {"nvidia_cloud_gaming", 11}, {"quadro_rtx", 12}, {"nvidia_rtx", 13}, {"nvidia", 14},
    {"geforce_rtx", 15}, {"titan_rtx", 16}, {NULL, 0}};
static const enum_name compute_mode_names[] = {
    {"default", 0}, {"exclusive_thread", 1}, {"prohibited", 2}, {"exclusive_process", 3}, {NULL, 0}};
static const enum_name driver_model_names[] = {
    {"unsupported", -1}, {"wddm", 0}, {"tcc", 1}, {"wdm", 1}, {"mcdm", 2}, {NULL, 0}};
static const enum_name *const enum_tables[] = {
    [E_ARCH] = arch_names, [E_BRAND] = brand_names,
    [E_COMPUTE_MODE] = compute_mode_names, [E_DRIVER_MODEL] = driver_model_names};

typedef struct {
    const char *key;
    enum ktype type;
    size_t off;          /* offsetof(fg_gpu, field) */
    size_t cap;          /* K_STR: buffer size */
    long long lo, hi;    /* integer range */
} gkey;

#define G(f) offsetof(fg_gpu, f)
#define U32MAX 4294967295LL
static const gkey gpu_keys[] = {
    {"name", K_STR, G(name), FG_NAME_LEN, 0, 0},
    {"uuid", K_UUID, 0, 0, 0, 0},
    {"serial", K_STR, G(serial), FG_SERIAL_LEN, 0, 0},
    {"pci_bus_id", K_PCI, 0, 0, 0, 0},
    {"pci_device_id", K_U32, G(pci_device_id), 0, 0, U32MAX},
    {"pci_subsystem_id", K_U32, G(pci_subsystem_id), 0, 0, U32MAX},
    {"minor_number", K_U32, G(minor_number), 0, 0, U32MAX},
    {"ecc_mode", K_ECC, G(ecc_mode), 0, 0, 0},
    {"ecc_mode_pending", K_ECC_PENDING, G(ecc_pending), 0, 0, 0},
    {"ecc.volatile.corrected", K_U64, G(ecc_vol_corr), 0, 0, LLONG_MAX},
    {"ecc.volatile.uncorrected", K_U64, G(ecc_vol_unc), 0, 0, LLONG_MAX},
    {"ecc.aggregate.corrected", K_U64, G(ecc_agg_corr), 0, 0, LLONG_MAX},
    {"ecc.aggregate.uncorrected", K_U64, G(ecc_agg_unc), 0, 0, LLONG_MAX},
    {"retired.sbe", K_U32, G(retired_sbe), 0, 0, 65536},
    {"retired.dbe", K_U32, G(retired_dbe), 0, 0, 65536},
    {"retired.pending", K_BOOL, G(retired_pending), 0, 0, 0},
    {"remap.correctable", K_U32, G(remap_corr), 0, 0, U32MAX},
    {"remap.uncorrectable", K_U32, G(remap_unc), 0, 0, U32MAX},
    {"remap.pending", K_BOOL, G(remap_pending), 0, 0, 0},
    {"remap.failure", K_BOOL, G(remap_failure), 0, 0, 0},
    {"sram.threshold_exceeded", K_BOOL, G(sram_threshold), 0, 0, 0},
    {"sram.aggregate.uncorrected_parity", K_U64, G(sram_agg_unc_parity), 0, 0, LLONG_MAX},
    {"sram.aggregate.uncorrected_secded", K_U64, G(sram_agg_unc_secded), 0, 0, LLONG_MAX},
    {"recovery_action", K_U32, G(recovery_action), 0, 0, U32MAX},
    {"reset.fails", K_BOOL, G(reset_fails), 0, 0, 0},
    {"fault.recurs", K_BOOL, G(fault_recurs), 0, 0, 0},
    /* MiB values are capped at 16 TiB so byte counts never overflow. */
    {"memory.total_mib", K_U64, G(mem_total_mib), 0, 0, 1LL << 24},
    {"memory.used_mib", K_U64, G(mem_used_mib), 0, 0, 1LL << 24},
    {"memory.reserved_mib", K_U64, G(mem_reserved_mib), 0, 0, 1LL << 24},
    {"processes", K_PROCS, 0, 0, 0, 0},
    {"temperature_c", K_U32, G(temp_c), 0, 0, 1000},
    {"temperature.slowdown_c", K_U32, G(temp_slowdown_c), 0, 0, 1000},
    {"temperature.shutdown_c", K_U32, G(temp_shutdown_c), 0, 0, 1000},
    {"power_mw", K_U32, G(power_mw), 0, 0, U32MAX},
    {"clocks_event_reasons", K_U64, G(clocks_event_reasons), 0, 0, LLONG_MAX},
    {"pcie.gen_current", K_U32, G(pcie_gen_cur), 0, 0, 64},
    {"pcie.gen_max", K_U32, G(pcie_gen_max), 0, 0, 64},
    {"pcie.width_current", K_U32, G(pcie_width_cur), 0, 0, 64},
    {"pcie.width_max", K_U32, G(pcie_width_max), 0, 0, 64},
    {"persistence_mode", K_BOOL, G(persistence_mode), 0, 0, 0},
    {"mig_mode", K_BOOL, G(mig_mode), 0, 0, 0},
    {"lost", K_BOOL, G(lost), 0, 0, 0},
    {"unsupported", K_UNSUP, G(unsupported), 0, 0, 0},
    {"failing", K_UNSUP, G(failing), 0, 0, 0},
    {"failing.error", K_INT, G(failing_error), 0, 1, 999},
    {"nvml.hang_s", K_SECONDS, G(nvml_hang_s), 0, 0, 0},
    {"nvml.clock_stall_s", K_SECONDS, G(nvml_clock_stall_s), 0, 0, 0},
    {"cuda.init_error", K_INT, G(cuda_init_error), 0, 0, INT_MAX},
    {"cuda.alloc_error", K_INT, G(cuda_alloc_error), 0, 0, INT_MAX},
    {"cuda.corrupt", K_BOOL, G(cuda_corrupt), 0, 0, 0},
    {"cuda.hang_s", K_SECONDS, G(cuda_hang_s), 0, 0, 0},
    {"cuda.readback_s_per_gib", K_SECONDS, G(cuda_readback_s_per_gib), 0, 0, 0},
    {"cuda.crash", K_INT, G(cuda_crash), 0, 0, 64},
    /* identity and monitoring (nvitop, gpustat, exporters) */
    {"architecture", K_ENUM, G(arch), E_ARCH, 0, 0},
    {"brand", K_ENUM, G(brand), E_BRAND, 0, 0},
    {"cuda_cc", K_CC, 0, 0, 0, 0},
    {"display_mode", K_BOOL, G(display_mode), 0, 0, 0},
    {"display_active", K_BOOL, G(display_active), 0, 0, 0},
    {"temperature.gpu_max_c", K_INT, G(temp_gpu_max_c), 0, -1, 1000},
    {"utilization.gpu", K_U32, G(util_gpu), 0, 0, 100},
    {"utilization.memory", K_U32, G(util_mem), 0, 0, 100},
    {"utilization.encoder", K_U32, G(util_enc), 0, 0, 100},
    {"utilization.decoder", K_U32, G(util_dec), 0, 0, 100},
    {"pstate", K_U32, G(pstate), 0, 0, 15},
    {"fan_pct", K_INT, G(fan_pct), 0, -1, 100},
    {"fans", K_U32, G(fans), 0, 0, 64},
    {"power_limit_mw", K_U32, G(power_limit_mw), 0, 0, U32MAX},
    {"power.default_limit_mw", K_U32, G(power_default_limit_mw), 0, 0, U32MAX},
    {"power.enforced_limit_mw", K_U32, G(power_enforced_limit_mw), 0, 0, U32MAX},
    {"power.min_limit_mw", K_U32, G(power_min_limit_mw), 0, 0, U32MAX},
    {"power.max_limit_mw", K_U32, G(power_max_limit_mw), 0, 0, U32MAX},
    {"energy_mj", K_U64, G(energy_mj), 0, 0, LLONG_MAX},
    {"clocks.graphics_mhz", K_INT, G(clock_mhz[0]), 0, -1, 100000},
    {"clocks.sm_mhz", K_INT, G(clock_mhz[1]), 0, -1, 100000},
    {"clocks.mem_mhz", K_INT, G(clock_mhz[2]), 0, -1, 100000},
    {"clocks.video_mhz", K_INT, G(clock_mhz[3]), 0, -1, 100000},
    {"clocks.graphics_max_mhz", K_INT, G(clock_max_mhz[0]), 0, -1, 100000},
    {"clocks.sm_max_mhz", K_INT, G(clock_max_mhz[1]), 0, -1, 100000},
    {"clocks.mem_max_mhz", K_INT, G(clock_max_mhz[2]), 0, -1, 100000},
    {"clocks.video_max_mhz", K_INT, G(clock_max_mhz[3]), 0, -1, 100000},
    {"compute_mode", K_ENUM, G(compute_mode), E_COMPUTE_MODE, 0, 0},
    {"driver_model", K_ENUM, G(driver_model), E_DRIVER_MODEL, 0, 0},
    {"bar1.total_mib", K_U64, G(bar1_total_mib), 0, 0, 1LL << 24},
    {"bar1.used_mib", K_U64, G(bar1_used_mib), 0, 0, 1LL << 24},
    {"vbios_version", K_STR, G(vbios), FG_VBIOS_LEN, 0, 0},
    {"pcie.tx_kbps", K_U32, G(pcie_tx_kbps), 0, 0, U32MAX},
    {"pcie.rx_kbps", K_U32, G(pcie_rx_kbps), 0, 0, U32MAX},
    {"graphics_processes", K_GPROCS, 0, 0, 0, 0},
    {"mig.instances", K_U32, G(mig_instances), 0, 0, FG_MAX_MIG},
    {"mig.memory_mib", K_U64, G(mig_memory_mib), 0, 0, 1LL << 24},
    {"mig.memory_used_mib", K_U64, G(mig_used_mib), 0, 0, 1LL << 24},
    {"mig.gpu_instance_ids", K_GI_IDS, 0, 0, 0, 0},
    /* NVLink, the NVSwitch fabric, PCIe replays, HBM (nvml_fabric.c) */
    {"memory_temperature_c", K_U32, G(mem_temp_c), 0, 0, 1000},
    {"memory_temperature.max_c", K_U32, G(mem_temp_max_c), 0, 0, 1000},
    {"pcie.replay", K_U32, G(pcie_replay), 0, 0, U32MAX},
    {"nvlink.links", K_U32, G(nvlink_links), 0, 0, FG_MAX_LINKS},
    {"nvlink.down", K_LINKS, 0, 0, 0, 0},
    {"fabric.state", K_FABRIC, 0, 0, 0, 0},
    {"fabric.status", K_U32, G(fabric_status), 0, 0, U32MAX},
    {"fabric.clique_id", K_U32, G(fabric_clique_id), 0, 0, U32MAX},
    {"fabric.cluster_uuid", K_FUUID, 0, 0, 0, 0},
    {"fabric.health_mask", K_U32, G(fabric_health_mask), 0, 0, U32MAX},
    {"fabric.health_summary", K_INT, G(fabric_health_summary), 0, -1, 3},
    {"remap.histogram", K_HIST, 0, 0, 0, 0},
    /* the deep level (cuda_deep.c) */
    {"mem.stuck_bits", K_STUCK, 0, 0, 0, 0},
    {"perf.hbm_gbps", K_GBPS, G(hbm_gbps), 0, 0, 0},
    {"perf.h2d_gbps", K_GBPS, G(h2d_gbps), 0, 0, 0},
    {"perf.d2h_gbps", K_GBPS, G(d2h_gbps), 0, 0, 0},
    {"perf.gflops", K_GBPS, G(gflops), 0, 0, 0},
    {"perf.throttle_under_load", K_REASONS, 0, 0, 0, 0},
    {"nvlink.peer_gbps", K_GBPS, G(peer_gbps), 0, 0, 0},
    {"p2p.pcie", K_U32, G(pcie_p2p), 0, 0, 1},
    {"cuda.sm_count", K_U32, G(sm_count), 0, 1, 4096},
    {"cuda.max_threads_per_sm", K_U32, G(max_threads_per_sm), 0, 32, 4096},
    {"perf.throttle_after_s", K_SECONDS, G(throttle_after_s), 0, 0, 0},
    {"perf.tensor_gflops", K_GBPS, G(tensor_gflops), 0, 0, 0},
    {"compute.wrong", K_U32, G(compute_wrong), 0, 0, 1 << 30},
    {"mem.dbe_under_test", K_U32, G(dbe_under_test), 0, 0, 1 << 20},
};

/* gpu.N.nvlink.L.KEY / gpu.N.nvlink.*.KEY: one link's error counter, or every link's. */
static int apply_link_key(fg_gpu *g, const char *sub, const char *v, perr *e)
{
    static const struct { const char *name; size_t off; } counters[] = {
        {"crc_errors", G(nvlink_crc)}, {"replay_errors", G(nvlink_replay)},
        {"recovery_errors", G(nvlink_recovery)},
    };
    const char *dot = strchr(sub, '.');
    if (!dot)
        return fail(e, "unknown key 'nvlink.%s'", sub);
    long long link = -1, x;
    if (!(dot - sub == 1 && sub[0] == '*')) {
        char idx[8];
        if (dot - sub >= (long)sizeof idx)
            return fail(e, "bad link in 'nvlink.%s'", sub);
        memcpy(idx, sub, (size_t)(dot - sub));
        idx[dot - sub] = '\0';
        if (!isdigit((unsigned char)idx[0]) || parse_ll(idx, 0, FG_MAX_LINKS - 1, &link, e))
            return fail(e, "bad link in 'nvlink.%s' (0..35 or *)", sub);
    }
    if (strcmp(dot + 1, "remote") == 0) {
        fg_gpu far;
        if (parse_pci(v, &far, e))
            return -1;
        for (int l = 0; l < FG_MAX_LINKS; l++)
            if (link < 0 || l == link)
                g->link_remote[l] = FG_REMOTE_SET | fg_pci_key(&far);
        return 0;
    }
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
        if (strcmp(dot + 1, counters[i].name) != 0)
            continue;
        if (parse_ll(v, 0, LLONG_MAX, &x, e))
            return -1;
        unsigned long long *arr = (unsigned long long *)(void *)((char *)g + counters[i].off);
        for (int l = 0; l < FG_MAX_LINKS; l++)
            if (link < 0 || l == link)
                arr[l] = (unsigned long long)x;
        return 0;
    }
    return fail(e, "unknown key 'nvlink.%s' (remote, crc_errors, replay_errors or recovery_errors)", sub);
}

/* gpu.N.nvlink.peer.M.gbps: the copy rate from this GPU to GPU M. */
static int apply_peer_key(fg_gpu *g, const char *sub, const char *v, perr *e)
{
    char idx[8];
    const char *dot = strchr(sub, '.');
    long long m;
    double gbps;
    if (!dot || strcmp(dot, ".gbps") != 0 || dot - sub == 0 || dot - sub >= (long)sizeof idx)
        return fail(e, "unknown key 'nvlink.peer.%s' (nvlink.peer.M.gbps)", sub);
    memcpy(idx, sub, (size_t)(dot - sub));
    idx[dot - sub] = '\0';
    if (!isdigit((unsigned char)idx[0]) || parse_ll(idx, 0, FG_MAX_GPUS - 1, &m, e))
        return fail(e, "bad GPU in 'nvlink.peer.%s' (0..255)", sub);
    char *end;
    gbps = strtod(v, &end);
    if (end == v || *end != '\0' || !(gbps > 0) || !isfinite(gbps))
        return fail(e, "bad rate '%s' for nvlink.peer.M.gbps (GB/s > 0)", v);
    for (unsigned int i = 0; i < g->nrates; i++)
        if (g->rate_peer[i] == (unsigned int)m) {
            g->rate_gbps[i] = gbps;
            return 0;
        }
    if (g->nrates >= FG_MAX_PEER_RATES)
        return fail(e, "more than 16 nvlink.peer.M.gbps keys on one GPU (%s)", sub);
    g->rate_peer[g->nrates] = (unsigned int)m;
    g->rate_gbps[g->nrates++] = gbps;
    return 0;
}

unsigned long long fg_pci_key(const fg_gpu *g)
{
    return ((unsigned long long)g->pci_domain << 16) | (g->pci_bus << 8) | g->pci_device;
}

static int link_active(const fg_gpu *g, unsigned int l)
{
    return l < g->nvlink_links && l < FG_MAX_LINKS && !((g->nvlink_down >> l) & 1);
}

unsigned int fg_links_between(const fg_scenario *s, unsigned int a, unsigned int b)
{
    const fg_gpu *ga = &s->gpu[a];
    unsigned long long want = FG_REMOTE_SET | fg_pci_key(&s->gpu[b]);
    unsigned int n = 0;
    for (unsigned int l = 0; l < FG_MAX_LINKS; l++)
        n += link_active(ga, l) && ga->link_remote[l] == want;
    return n;
}

unsigned int fg_switch_links(const fg_gpu *g)
{
    unsigned int n = 0;
    for (unsigned int l = 0; l < FG_MAX_LINKS; l++)
        n += link_active(g, l) && !g->link_remote[l];
    return n;
}

int fg_p2p(const fg_scenario *s, unsigned int a, unsigned int b)
{
    if (a == b)
        return FG_P2P_NONE;
    if (fg_links_between(s, a, b) && fg_links_between(s, b, a))
        return FG_P2P_NVLINK;
    if (fg_switch_links(&s->gpu[a]) && fg_switch_links(&s->gpu[b]))
        return FG_P2P_SWITCH;
    if (s->gpu[a].pcie_p2p && s->gpu[b].pcie_p2p)
        return FG_P2P_PCIE;
    return FG_P2P_NONE;
}

double fg_peer_rate(const fg_gpu *g, unsigned int b)
{
    for (unsigned int i = 0; i < g->nrates; i++)
        if (g->rate_peer[i] == b)
            return g->rate_gbps[i];
    return 0;
}

/* "L[,L...]" (or empty): links that report inactive. */
static int parse_links(const char *v, fg_gpu *g, perr *e)
{
    uint64_t mask = 0;
    const char *p = v;
    while (*p) {
        char *end;
        if (!isdigit((unsigned char)*p))
            return fail(e, "bad link list '%s' (expected L[,L...])", v);
        unsigned long l = strtoul(p, &end, 10);
        if (l >= FG_MAX_LINKS || (*end != ',' && *end != '\0'))
            return fail(e, "bad link list '%s' (links 0..35)", v);
        mask |= (uint64_t)1 << l;
        p = *end == ',' ? end + 1 : end;
        while (*p == ' ')
            p++;
    }
    g->nvlink_down = mask;
    return 0;
}

static int parse_enum(const char *v, const enum_name *names, unsigned int *out, perr *e)
{
    for (const enum_name *n = names; n->name; n++)
        if (strcmp(n->name, v) == 0) {
            *out = (unsigned int)n->value;   /* int fields take -1 through the same bits */
            return 0;
        }
    char list[200] = "";
    for (const enum_name *n = names; n->name; n++) {
        size_t used = strlen(list);
        snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "", n->name);
    }
    char m[256];
    snprintf(m, sizeof m, "bad value '%.40s' (expected one of: %s)", v, list);
    return fail(e, "%s", m);
}

/* "ID[,ID...]": up to 7 distinct GPU instance IDs, 1..64 */
static int parse_gi_ids(const char *v, fg_gpu *g, perr *e)
{
    unsigned int ids[FG_MAX_MIG], n = 0;
    const char *p = v;
    while (*p) {
        char num[8];
        size_t len = strcspn(p, ",");
        long long x;
        perr ignore;
        if (n == FG_MAX_MIG || len == 0 || len >= sizeof num)
            return fail(e, "bad mig.gpu_instance_ids '%s' (expected up to 7 IDs 1..64, comma-separated)", v);
        memcpy(num, p, len);
        num[len] = '\0';
        char *q = num;
        while (*q == ' ' || *q == '\t')
            q++;
        for (char *end = q + strlen(q); end > q && (end[-1] == ' ' || end[-1] == '\t');)
            *--end = '\0';
        if (parse_ll(q, 1, 64, &x, &ignore))
            return fail(e, "bad mig.gpu_instance_ids '%s' (expected up to 7 IDs 1..64, comma-separated)", v);
        for (unsigned int i = 0; i < n; i++)
            if (ids[i] == (unsigned int)x)
                return fail(e, "repeated ID in mig.gpu_instance_ids '%s'", v);
        ids[n++] = (unsigned int)x;
        p += len;
        if (*p == ',' && *++p == '\0')
            return fail(e, "bad mig.gpu_instance_ids '%s' (trailing comma)", v);
    }
    memcpy(g->mig_gi, ids, n * sizeof ids[0]);
    g->mig_ngi = n;
    return 0;
}

/* "ADDR:BIT[=V][,...]": bytes of the GPU's memory (offset from its start, decimal or 0x hex)
 * whose bit BIT (0..7) reads V (default 1) whatever was written. */
static int parse_stuck(const char *v, fg_gpu *g, perr *e)
{
    unsigned int n = 0;
    const char *p = v;
    while (*p) {
        char item[64], *colon, *eq;
        size_t len = strcspn(p, ",");
        long long addr, bit, val = 1;
        perr ignore;
        if (n == FG_MAX_STUCK || len == 0 || len >= sizeof item)
            return fail(e, "bad mem.stuck_bits '%s' (expected up to 16 ADDR:BIT[=0|1], comma-separated)", v);
        memcpy(item, p, len);
        item[len] = '\0';
        colon = strchr(item, ':');
        if (!colon)
            return fail(e, "bad mem.stuck_bits '%s' (expected ADDR:BIT[=0|1])", v);
        *colon = '\0';
        eq = strchr(colon + 1, '=');
        if (eq)
            *eq = '\0';
        if (parse_ll(item, 0, 1LL << 44, &addr, &ignore) || parse_ll(colon + 1, 0, 7, &bit, &ignore) ||
            (eq && parse_ll(eq + 1, 0, 1, &val, &ignore)))
            return fail(e, "bad mem.stuck_bits '%s' (ADDR a byte offset, BIT 0..7, V 0 or 1)", v);
        g->stuck_addr[n] = (unsigned long long)addr;
        g->stuck_bit[n] = (unsigned char)bit;
        g->stuck_value[n] = (unsigned char)val;
        n++;
        p += len;
        if (*p == ',' && *++p == '\0')
            return fail(e, "bad mem.stuck_bits '%s' (trailing comma)", v);
    }
    g->nstuck = n;
    return 0;
}

/* A speed in GB/s or GFLOP/s: a positive finite number. */
static int parse_rate(const char *v, double *out, perr *e)
{
    errno = 0;
    char *end;
    double d = strtod(v, &end);
    if (*v == '\0' || *end != '\0' || errno == ERANGE || !isfinite(d) || d <= 0 || d > 1e9)
        return fail(e, "bad rate '%s' (a positive number, GB/s or GFLOP/s)", v);
    *out = d;
    return 0;
}

/* Clocks event reasons: a mask (0x28) or names as nvml.h has them (sw_thermal,hw_slowdown). */
static int parse_reasons(const char *v, fg_gpu *g, perr *e)
{
    static const enum_name names[] = {
        {"gpu_idle", 0x1}, {"applications_clocks_setting", 0x2}, {"sw_power_cap", 0x4},
        {"hw_slowdown", 0x8}, {"sync_boost", 0x10}, {"sw_thermal", 0x20}, {"hw_thermal", 0x40},
        {"hw_power_brake", 0x80}, {"display_clock_setting", 0x100}, {NULL, 0}};
    long long x;
    perr ignore;
    if (parse_ll(v, 0, LLONG_MAX, &x, &ignore) == 0) {
        g->throttle_under_load = (unsigned long long)x;
        return 0;
    }
    unsigned long long mask = 0;
    const char *p = v;
    while (*p) {
        size_t len = strcspn(p, ",");
        const enum_name *n;
        for (n = names; n->name; n++)
            if (strlen(n->name) == len && strncmp(n->name, p, len) == 0)
                break;
        if (!n->name)
            return fail(e, "bad perf.throttle_under_load '%s' (a mask, or names: sw_power_cap, "
                           "hw_slowdown, sw_thermal, hw_thermal, hw_power_brake, ...)", v);
        mask |= (unsigned long long)n->value;
        p += len;
        if (*p == ',')
            p++;
    }
    g->throttle_under_load = mask;
    return 0;
}

/* "MAJOR.MINOR", e.g. 9.0 or 12.1 */
static int parse_cc(const char *v, fg_gpu *g, perr *e)
{
    unsigned int major, minor;
    char tail;
    if (sscanf(v, "%2u.%2u%c", &major, &minor, &tail) != 2 || !isdigit((unsigned char)v[0]))
        return fail(e, "bad cuda_cc '%s' (expected MAJOR.MINOR, e.g. 9.0)", v);
    g->cc_major = major;
    g->cc_minor = minor;
    return 0;
}

static int apply_gpu_key(fg_gpu *g, const gkey *k, const char *v, perr *e)
{
    char *base = (char *)g;
    long long x;
    int b;
    double d;
    switch (k->type) {
    case K_STR:
        return parse_string(v, base + k->off, k->cap, e);
    case K_UUID:
        return parse_uuid(v, g, e);
    case K_PCI:
        return parse_pci(v, g, e);
    case K_PROCS:
        return parse_procs(v, g->procs, &g->nprocs, e);
    case K_GPROCS:
        return parse_procs(v, g->gprocs, &g->ngprocs, e);
    case K_ENUM:
        return parse_enum(v, enum_tables[k->cap], (unsigned int *)(void *)(base + k->off), e);
    case K_CC:
        return parse_cc(v, g, e);
    case K_GI_IDS:
        return parse_gi_ids(v, g, e);
    case K_UNSUP:
        return parse_unsupported(v, (uint64_t *)(void *)(base + k->off), e);
    case K_U32:
        if (parse_ll(v, k->lo, k->hi, &x, e))
            return -1;
        *(unsigned int *)(void *)(base + k->off) = (unsigned int)x;
        return 0;
    case K_U64:
        if (parse_ll(v, k->lo, k->hi, &x, e))
            return -1;
        *(unsigned long long *)(void *)(base + k->off) = (unsigned long long)x;
        return 0;
    case K_INT:
        if (parse_ll(v, k->lo, k->hi, &x, e))
            return -1;
        *(int *)(void *)(base + k->off) = (int)x;
        return 0;
    case K_BOOL:
        if (parse_bool(v, &b, e))
            return -1;
        *(int *)(void *)(base + k->off) = b;
        return 0;
    case K_SECONDS:
        if (parse_seconds(v, &d, e))
            return -1;
        *(double *)(void *)(base + k->off) = d;
        return 0;
    case K_ECC:
        if (strcmp(v, "enabled") == 0)
            g->ecc_mode = FG_ECC_ENABLED;
        else if (strcmp(v, "disabled") == 0)
            g->ecc_mode = FG_ECC_DISABLED;
        else if (strcmp(v, "unsupported") == 0)
            g->ecc_mode = FG_ECC_UNSUPPORTED;
        else
            return fail(e, "bad ecc_mode '%s' (expected enabled, disabled or unsupported)", v);
        return 0;
    case K_LINKS:
        return parse_links(v, g, e);
    case K_FABRIC: {
        static const char *const states[] = {"not_supported", "not_started", "in_progress", "completed"};
        for (unsigned int i = 0; i < 4; i++)
            if (strcmp(v, states[i]) == 0) {
                g->fabric_state = i;
                return 0;
            }
        return fail(e, "bad fabric.state '%s' (not_supported, not_started, in_progress or completed)", v);
    }
    case K_FUUID: {
        fg_gpu tmp;
        char buf[FG_UUID_LEN];
        snprintf(buf, sizeof buf, "GPU-%s", v);
        if (strlen(v) + 5 > sizeof buf || parse_uuid(buf, &tmp, e))
            return fail(e, "bad fabric.cluster_uuid '%s' (expected xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", v);
        memcpy(g->fabric_cluster_uuid, tmp.uuid_bytes, 16);
        return 0;
    }
    case K_HIST: {
        unsigned int h[5];
        int used = 0;
        if (sscanf(v, "%u,%u,%u,%u,%u%n", &h[0], &h[1], &h[2], &h[3], &h[4], &used) != 5 ||
            v[used] != '\0')
            return fail(e, "bad remap.histogram '%s' (expected MAX,HIGH,PARTIAL,LOW,NONE)", v);
        memcpy(g->remap_hist, h, sizeof h);
        return 0;
    }
    case K_STUCK:
        return parse_stuck(v, g, e);
    case K_GBPS:
        return parse_rate(v, (double *)(void *)(base + k->off), e);
    case K_REASONS:
        return parse_reasons(v, g, e);
    case K_ECC_PENDING:
        if (strcmp(v, "enabled") == 0)
            g->ecc_pending = FG_ECC_ENABLED;
        else if (strcmp(v, "disabled") == 0)
            g->ecc_pending = FG_ECC_DISABLED;
        else
            return fail(e, "bad ecc_mode_pending '%s' (expected enabled or disabled)", v);
        return 0;
    }
    return fail(e, "%s", "internal error: key type");
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\v' || *s == '\f')
        s++;
    char *end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' ||
                       end[-1] == '\v' || end[-1] == '\f' || end[-1] == '\n'))
        *--end = '\0';
    return s;
}

/* One line, already stripped of its comment and trimmed, not empty. */
static int parse_line(fg_scenario *s, char *line, perr *e)
{
    char *eq = strchr(line, '=');
    if (!eq)
        return fail(e, "%s", "expected 'key = value'");
    *eq = '\0';
    char *key = trim(line);
    char *val = trim(eq + 1);
    if (*key == '\0')
        return fail(e, "%s", "missing key before '='");
    long long x;

    if (strcmp(key, "gpus") == 0) {
        if (parse_ll(val, 0, FG_MAX_GPUS, &x, e))
            return -1;
        s->ngpus = (unsigned int)x;
        return 0;
    }
    if (strcmp(key, "kernel_log") == 0)
        return parse_string(val, s->kernel_log, sizeof s->kernel_log, e);
    if (strcmp(key, "cuda.launch_log") == 0)
        return parse_string(val, s->launch_log, sizeof s->launch_log, e);
    if (strcmp(key, "driver_version") == 0)
        return parse_string(val, s->driver_version, sizeof s->driver_version, e);
    if (strcmp(key, "cuda_driver_version") == 0) {
        if (parse_ll(val, 0, INT_MAX, &x, e))
            return -1;
        s->cuda_driver_version = (int)x;
        return 0;
    }
    if (strcmp(key, "nvml.init_hang_s") == 0)
        return parse_seconds(val, &s->nvml_init_hang_s, e);
    if (strcmp(key, "nvidia_smi.reset_hang_s") == 0)
        return parse_seconds(val, &s->smi_reset_hang_s, e);
    if (strcmp(key, "nvidia_smi.pm_on_hang_s") == 0)
        return parse_seconds(val, &s->smi_pm_on_hang_s, e);
    if (strcmp(key, "cuda.pause_on_stall_s") == 0)
        return parse_seconds(val, &s->cuda_pause_on_stall_s, e);
    if (strcmp(key, "nvml.init_error") == 0) {
        if (parse_ll(val, 0, INT_MAX, &x, e))
            return -1;
        s->nvml_init_error = (int)x;
        return 0;
    }
    if (strncmp(key, "gpu.", 4) != 0)
        return fail(e, "unknown key '%s'", key);

    /* gpu.N.KEY or gpu.*.KEY */
    char *idx = key + 4;
    char *dot = strchr(idx, '.');
    if (!dot)
        return fail(e, "unknown key '%s' (expected gpu.N.KEY)", key);
    *dot = '\0';
    char *sub = dot + 1;
    int all = 0;
    long long n = 0;
    if (strcmp(idx, "*") == 0) {
        all = 1;
    } else {
        perr ignore;
        if (*idx == '\0' || *idx == '-' || *idx == '+' || parse_ll(idx, 0, LLONG_MAX, &n, &ignore)) {
            *dot = '.';
            return fail(e, "bad GPU index in key '%s'", key);
        }
        if (n >= FG_MAX_GPUS) {
            *dot = '.';
            return fail(e, "GPU index out of range 0..255 in key '%s'", key);
        }
    }
    if (strncmp(sub, "nvlink.peer.", 12) == 0) {
        if (!all)
            return apply_peer_key(gpu_at(s, (unsigned int)n), sub + 12, val, e);
        for (unsigned int i = 0; i < s->nfilled; i++)
            if (apply_peer_key(&s->gpu[i], sub + 12, val, e))
                return -1;
        return 0;
    }
    if (strncmp(sub, "nvlink.", 7) == 0 && (sub[7] == '*' || isdigit((unsigned char)sub[7]))) {
        if (!all)
            return apply_link_key(gpu_at(s, (unsigned int)n), sub + 7, val, e);
        for (unsigned int i = 0; i < s->nfilled; i++)
            if (apply_link_key(&s->gpu[i], sub + 7, val, e))
                return -1;
        return 0;
    }
    const gkey *k = NULL;
    for (size_t i = 0; i < sizeof gpu_keys / sizeof gpu_keys[0]; i++)
        if (strcmp(gpu_keys[i].key, sub) == 0)
            k = &gpu_keys[i];
    if (!k) {
        *dot = '.';
        return fail(e, "unknown key '%s'", key);
    }
    if (!all)
        return apply_gpu_key(gpu_at(s, (unsigned int)n), k, val, e);
    /* Parse once, then copy the result field to every GPU: a bad value is
     * reported once, and GPU-specific defaults (uuid...) are replaced by
     * the given value only for this key. */
    if (apply_gpu_key(gpu_at(s, 0), k, val, e))
        return -1;
    for (unsigned int i = 1; i < s->nfilled; i++)
        if (apply_gpu_key(&s->gpu[i], k, val, e))
            return -1;
    return 0;
}

/* A scenario's lines, one at a time, each with its comment cut and trimmed. */
typedef struct {
    const char *text;
    size_t len, pos;
    char *buf;      /* the current line; freed by the caller */
    size_t cap;
} line_reader;

/* 0: *line is the next line; 1: the text is done; -1: this line cannot be
 * read (a NUL byte, out of memory), *e says why. */
static int next_line(line_reader *r, char **line, perr *e)
{
    if (r->pos >= r->len)
        return 1;
    const char *start = r->text + r->pos;
    const char *nl = memchr(start, '\n', r->len - r->pos);
    size_t l = nl ? (size_t)(nl - start) : r->len - r->pos;
    r->pos += l + (nl ? 1 : 0);
    if (memchr(start, '\0', l))
        return fail(e, "%s", "NUL byte in line");
    if (l + 1 > r->cap) {
        char *nb = realloc(r->buf, l + 1);
        if (!nb)
            return fail(e, "%s", "out of memory");
        r->buf = nb;
        r->cap = l + 1;
    }
    memcpy(r->buf, start, l);
    r->buf[l] = '\0';
    char *hash = strchr(r->buf, '#');
    if (hash)
        *hash = '\0';
    *line = trim(r->buf);
    return 0;
}

/* The GPU count the text ends with (its last 'gpus = N' line), so that only
 * those GPUs get the defaults and the gpu.* lines.  A value that does not
 * parse gives every GPU: the parse proper then reports it at its line. */
static unsigned int final_gpu_count(const char *text, size_t len)
{
    line_reader r = {text, len, 0, NULL, 0};
    unsigned int count = 8;
    char *line;
    perr e;
    int got;
    while ((got = next_line(&r, &line, &e)) != 1) {
        char *eq = got == 0 ? strchr(line, '=') : NULL;
        if (!eq)
            continue;   /* not a key line, or unreadable: the parse proper says so */
        *eq = '\0';
        if (strcmp(trim(line), "gpus") != 0)
            continue;
        long long x;
        if (parse_ll(trim(eq + 1), 0, FG_MAX_GPUS, &x, &e)) {
            count = FG_MAX_GPUS;
            break;
        }
        count = (unsigned int)x;
    }
    free(r.buf);
    return count;
}

int fg_scenario_parse(fg_scenario *s, const char *text, size_t len, const char *path)
{
    unsigned int count = final_gpu_count(text, len);
    scenario_defaults(s, count ? count : 1);
    line_reader r = {text, len, 0, NULL, 0};
    unsigned long lineno = 0;
    int rc = 0, got;
    char *line;
    perr e;
    e.msg[0] = '\0';
    while ((got = next_line(&r, &line, &e)) != 1) {
        lineno++;
        if (got == 0 && (*line == '\0' || parse_line(s, line, &e) == 0))
            continue;
        fprintf(stderr, "fakegpu: %s:%lu: %s\n", path, lineno, e.msg);
        rc = -1;
        break;
    }
    free(r.buf);
    return rc;
}

int fg_scenario_load(fg_scenario *s)
{
    const char *path = getenv("FAKEGPU_SCENARIO");
    if (!path) {
        fg_scenario_defaults(s);
        return 0;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fakegpu: %s:0: cannot read scenario: %s\n", path, strerror(errno));
        return -1;
    }
    /* Read the whole file: a read error must fail the load, not truncate. */
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 8192;
            if (ncap > (64u << 20)) {
                fprintf(stderr, "fakegpu: %s:0: scenario larger than 64 MiB\n", path);
                free(text);
                fclose(f);
                return -1;
            }
            char *nt = realloc(text, ncap);
            if (!nt) {
                fprintf(stderr, "fakegpu: %s:0: out of memory\n", path);
                free(text);
                fclose(f);
                return -1;
            }
            text = nt;
            cap = ncap;
        }
        size_t got = fread(text + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        fprintf(stderr, "fakegpu: %s:0: cannot read scenario: %s\n", path, strerror(errno));
        free(text);
        fclose(f);
        return -1;
    }
    fclose(f);
    int rc = fg_scenario_parse(s, text ? text : "", len, path);
    free(text);
    return rc;
}
