/*
 * fakegpu nvidia-smi: the calls gpu-healthcheck makes of NVIDIA's tool, against the same
 * scenario file the fake NVML and CUDA read ($FAKEGPU_SCENARIO, parsed by scenario.c).
 *
 *   nvidia-smi --gpu-reset [-i N[,N...]]     (also -r)
 *   nvidia-smi -pm 0|1 [-i N[,N...]]         (also --persistence-mode=0|1)
 *
 * What it does, and where each behaviour comes from (README.md, "The fake nvidia-smi"):
 *   - refused while a process is listed on a GPU to reset, or while its persistence mode is on
 *     (it counts as a client of the device: the refusal of NVIDIA/NVSentinel#1690 was lifted by
 *     `nvidia-smi -pm 0 -i <uuid>` alone): the driver's message, verbatim from that real
 *     refusal (tests/fixtures/nvidia-smi/issue-nvsentinel-1690__*.txt), exit 255;
 *   - -pm 0|1: the persistence mode of the GPUs, persisted in the scenario; "All done." (verbatim,
 *     same thread);
 *   - gpu.N.reset.fails = 1: the same refusal layout with NVML's "Unknown Error" (no other real
 *     failure text was captured), exit 255;
 *   - on a node with an NVSwitch fabric (any GPU with fabric.state other than not_supported)
 *     a reset of some GPUs only (-i) is refused: which GPUs and switches NVIDIA requires to be
 *     reset together there is not verified (NOTES.md is silent), so the fake allows only the
 *     one grouping that is certainly complete, every GPU at once (a bare --gpu-reset);
 *   - success: "GPU <pci> was successfully reset." per GPU (verbatim, same thread), exit 0,
 *     and the reset persists: lines appended to the scenario (a later line wins) set the
 *     volatile ECC counters to 0, apply a pending row remap, retire pending pages, free the
 *     memory a leaked context held and clear the recovery action; with gpu.N.fault.recurs = 1
 *     the faults are left as they were (they come back at once, as a failing GPU's do);
 *   - with `kernel_log = PATH` in the scenario, one line per reset GPU is appended there;
 *   - nvidia_smi.reset_hang_s / nvidia_smi.pm_on_hang_s: --gpu-reset (before it does anything)
 *     or -pm 1 blocks this long, as a driver stuck in the reset or in re-initialising the
 *     device does, after noting "# fakegpu nvidia-smi ... hanging" in the scenario.
 * The scenario is rewritten whole to a temporary file and renamed over the old one, so a
 * process reading it at nvmlInit sees the old or the new file, never half of one.
 */
#define _GNU_SOURCE
#include "scenario.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static fg_scenario S;

static void pci_text(const fg_gpu *g, char *out, size_t cap)
{
    snprintf(out, cap, "%08X:%02X:%02X.0", g->pci_domain, g->pci_bus, g->pci_device);
}

static int usage(void)
{
    fprintf(stderr, "fakegpu nvidia-smi: only --gpu-reset and -pm 0|1, with [-i N[,N...]], are simulated\n");
    return 2;
}

/* Append `text` to the scenario, atomically (temporary file + rename). */
static int persist(const char *path, const char *text)
{
    FILE *in = fopen(path, "rb");
    if (!in) {
        fprintf(stderr, "fakegpu nvidia-smi: %s: %s\n", path, strerror(errno));
        return -1;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.nvidia-smi.%ld", path, (long)getpid());
    FILE *out = fopen(tmp, "wb");
    if (!out) {
        fclose(in);
        fprintf(stderr, "fakegpu nvidia-smi: %s: %s\n", tmp, strerror(errno));
        return -1;
    }
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        fwrite(buf, 1, n, out);
    fclose(in);
    fputs(text, out);
    if (fflush(out) != 0 || fsync(fileno(out)) != 0 || fclose(out) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "fakegpu nvidia-smi: cannot rewrite %s: %s\n", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int nvswitch_system(void)
{
    for (unsigned int i = 0; i < S.ngpus; i++)
        if (S.gpu[i].fabric_state != 0)
            return 1;
    return 0;
}

static int refuse(const unsigned int *targets, unsigned int n, const char *why_of(const fg_gpu *))
{
    unsigned int bad = 0;
    char pci[32];
    for (unsigned int t = 0; t < n; t++) {
        const char *why = why_of(&S.gpu[targets[t]]);
        if (!why)
            continue;
        if (bad++ == 0)
            printf("The following GPUs could not be reset:\n");
        pci_text(&S.gpu[targets[t]], pci, sizeof pci);
        printf("  GPU %s: %s\n", pci, why);
    }
    return (int)bad;
}

static const char *in_use(const fg_gpu *g)
{
    return (g->nprocs || g->ngprocs || g->persistence_mode) ? "In use by another client" : NULL;
}

static const char *fails(const fg_gpu *g)
{
    return g->lost ? "GPU is lost" : g->reset_fails ? "Unknown Error" : NULL;
}

/* Block `seconds` (a stuck driver call), once the scenario says so: tests wait for that line. */
static void hang(const char *what, double seconds)
{
    if (seconds <= 0)
        return;
    const char *path = getenv("FAKEGPU_SCENARIO");
    char note[128];
    snprintf(note, sizeof note, "# fakegpu nvidia-smi %s hanging for %g s (pid %ld)\n", what, seconds,
             (long)getpid());
    if (path)
        persist(path, note);
    struct timespec left = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&left, &left) != 0 && errno == EINTR)
        ;
}

/* -pm 0|1: the mode persists in the scenario (a later line wins), as the driver keeps it */
static int set_persistence(const unsigned int *targets, unsigned int n, int on)
{
    if (on)
        hang("-pm 1", S.smi_pm_on_hang_s);
    const char *path = getenv("FAKEGPU_SCENARIO");
    char text[FG_MAX_GPUS * 64 + 64];
    size_t used = (size_t)snprintf(text, sizeof text, "# fakegpu nvidia-smi -pm %d\n", on);
    for (unsigned int t = 0; t < n; t++)
        used += (size_t)snprintf(text + used, sizeof text - used, "gpu.%u.persistence_mode = %d\n",
                                 targets[t], on);
    if (path && persist(path, text) != 0)
        return 255;
    printf("All done.\n");
    return 0;
}

int main(int argc, char **argv)
{
    int reset = 0, persistence = -1;
    const char *ids = NULL;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--gpu-reset") || !strcmp(argv[a], "-r"))
            reset = 1;
        else if ((!strcmp(argv[a], "-pm") || !strcmp(argv[a], "--persistence-mode")) && a + 1 < argc)
            persistence = atoi(argv[++a]) ? 1 : 0;
        else if (!strncmp(argv[a], "--persistence-mode=", 19))
            persistence = atoi(argv[a] + 19) ? 1 : 0;
        else if ((!strcmp(argv[a], "-i") || !strcmp(argv[a], "--id")) && a + 1 < argc)
            ids = argv[++a];
        else if (!strncmp(argv[a], "--id=", 5))
            ids = argv[a] + 5;
        else
            return usage();
    }
    if (reset == (persistence >= 0))
        return usage();
    if (fg_scenario_load(&S) != 0)
        return 255;
    if (S.nvml_init_error) {
        printf("Failed to initialize NVML: error %d\n", S.nvml_init_error);
        return 255;
    }
    unsigned int targets[FG_MAX_GPUS], n = 0;
    if (ids) {
        char *copy = strdup(ids), *save = NULL;
        for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            char *end;
            long v = strtol(tok, &end, 10);
            if (*end || v < 0 || (unsigned long)v >= S.ngpus || n >= FG_MAX_GPUS) {
                printf("No devices were found matching the ID '%s'\n", tok);  /* fake's wording */
                free(copy);
                return 6;
            }
            targets[n++] = (unsigned int)v;
        }
        free(copy);
    } else {
        for (unsigned int i = 0; i < S.ngpus; i++)
            targets[n++] = i;
    }
    if (persistence >= 0)
        return set_persistence(targets, n, persistence);
    if (ids && n < S.ngpus && nvswitch_system()) {
        printf("fakegpu nvidia-smi: this node has an NVSwitch fabric; which GPUs and switches "
               "must be reset together there is not verified (NOTES.md), so the fake resets "
               "only every GPU at once (--gpu-reset without -i)\n");
        return 255;
    }
    hang("--gpu-reset", S.smi_reset_hang_s);
    int busy = refuse(targets, n, in_use);
    if (busy) {
        /* verbatim from a real refusal, NVIDIA/NVSentinel#1690 */
        printf("\n%d device is currently being used by one or more other processes (e.g. Fabric\n"
               "Manager, CUDA application, graphics application such as an X server, or a\n"
               "monitoring application such as another instance of nvidia-smi). Please first kill\n"
               "all processes using this device and all compute applications running in the\n"
               "system.\n", busy);
        return 255;
    }
    if (refuse(targets, n, fails))
        return 255;

    const char *path = getenv("FAKEGPU_SCENARIO");
    char text[FG_MAX_GPUS * 512 + 256];
    size_t used = (size_t)snprintf(text, sizeof text, "# fakegpu nvidia-smi --gpu-reset%s%s at %ld\n",
                                   ids ? " -i " : "", ids ? ids : "", (long)time(NULL));
    FILE *klog = S.kernel_log[0] ? fopen(S.kernel_log, "a") : NULL;
    char pci[32];
    for (unsigned int t = 0; t < n; t++) {
        unsigned int i = targets[t];
        const fg_gpu *g = &S.gpu[i];
        pci_text(g, pci, sizeof pci);
        if (g->fault_recurs)
            used += (size_t)snprintf(text + used, sizeof text - used,
                                     "# gpu.%u.fault.recurs: its faults are back at once\n", i);
        else
            used += (size_t)snprintf(text + used, sizeof text - used,
                                     "gpu.%u.ecc.volatile.corrected = 0\ngpu.%u.ecc.volatile.uncorrected = 0\n"
                                     "gpu.%u.remap.pending = 0\ngpu.%u.retired.pending = 0\n"
                                     "gpu.%u.memory.used_mib = 4\ngpu.%u.recovery_action = 0\n",
                                     i, i, i, i, i, i);
        if (klog)  /* no real line of a GPU reset was captured: this one says it is the fake's */
            fprintf(klog, "NVRM: fakegpu: GPU at PCI:%s reset by nvidia-smi --gpu-reset, driver "
                          "state initialised again\n", pci);
    }
    if (klog)
        fclose(klog);
    if (path && persist(path, text) != 0)
        return 255;
    for (unsigned int t = 0; t < n; t++) {
        pci_text(&S.gpu[targets[t]], pci, sizeof pci);
        printf("GPU %s was successfully reset.\n", pci);
    }
    return 0;
}
