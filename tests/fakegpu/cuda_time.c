/*
 * fakegpu libcuda.so.1, the device's time: events, synchronisation, the load a kernel puts on a
 * GPU (which the fake NVML in the same process reads), and the record of what ran.
 *
 * Two clocks.  The simulated timeline (seconds of device work, one per process) moves on by
 * what each launch and copy takes at the scenario's speeds (cuda_deep.c: launch_seconds);
 * cuEventRecord stamps it and cuEventElapsedTime subtracts, so a measured figure is what the
 * scenario says, whatever the host's speed.  And each GPU's queue on the device clock (the
 * host's monotonic clock, less the host's stalls under cuda.pause_on_stall_s): work starts
 * when the GPU's earlier work ends (or now, on an idle GPU) and ends its simulated time later.
 * An event is ready when the work before it has ended: cuEventQuery says CUDA_ERROR_NOT_READY
 * until then and cuEventSynchronize, cuCtxSynchronize and the synchronous copies wait for it,
 * as on the real driver.  So a sustained-load test lasts what it asks for, and NVML read
 * meanwhile sees the GPU under load.
 *
 * Load: from the start of a kernel until the GPU's last kernel ends, the GPU is under load;
 * kernels queued back to back are one stretch of load.  fakegpu_load_reasons gives the fake
 * NVML gpu.N.perf.throttle_under_load once a stretch has lasted gpu.N.perf.throttle_after_s.
 *
 * cuda.pause_on_stall_s = S: the GPUs' queues run on a device clock that stands still while the
 * host stalls this process.  Any gap longer than S between two readings of the device clock
 * (every launch, event query and NVML reading under load reads it; the fake's own waits do
 * not count) is a host stall: the process was not running, so neither was the device it
 * simulates, and the work queued before the stall is still queued after it.  A reading of a
 * loaded GPU then sees it loaded however long the host stalled, and a test of the deep
 * level's load trace does not depend on the host's speed.  Unset (0): the host's clock, as
 * before, and a stall longer than the queue lets the GPU idle (gpu.N.nvml.clock_stall_s
 * simulates one).
 *
 * cuda.launch_log = PATH: every launch appends one line,
 *   gpu=N kernel=NAME grid=G block=B seconds=S
 * (S: its simulated time), so a test can read what ran on which GPU, and for how long, without
 * timing anything itself.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_internal.h"

typedef struct CUevent_st {
    double at;                  /* simulated timeline, seconds */
    double ready;               /* device clock: when the work before it ends */
    int recorded;
} *CUevent;

enum { CUDA_ERROR_INVALID_HANDLE = 400, CUDA_ERROR_NOT_READY = 600 };

static double timeline;                         /* seconds (lock held) */
static double busy_until[FG_MAX_GPUS];          /* device clock: the GPU's queued work ends */
static double kernel_until[FG_MAX_GPUS];        /* device clock: its last kernel ends */
static double load_since[FG_MAX_GPUS];          /* device clock: its current stretch began */

double fg_monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static pthread_mutex_t clock_lock = PTHREAD_MUTEX_INITIALIZER;
static double stalled_s;                        /* host seconds the device clock stood still */
static double last_read;                        /* host monotonic: the device clock's last reading */

double fg_device_now(void)
{
    pthread_mutex_lock(&clock_lock);
    double now = fg_monotonic();
    double pause = scn ? scn->cuda_pause_on_stall_s : 0.0;
    if (pause > 0 && last_read > 0 && now - last_read > pause)
        stalled_s += now - last_read;
    last_read = now;
    double device = now - stalled_s;
    pthread_mutex_unlock(&clock_lock);
    return device;
}

void fg_sleep_until(double when)
{
    double now = fg_device_now();
    if (when > now)
        fg_sleep(when - now);
    /* our own wait, not a host stall: the device ran meanwhile */
    pthread_mutex_lock(&clock_lock);
    last_read = fg_monotonic();
    pthread_mutex_unlock(&clock_lock);
}

double fg_device_work(int gpu, double seconds, double issued, int kernel)
{
    double start = busy_until[gpu] > issued ? busy_until[gpu] : issued;
    if (kernel) {
        if (kernel_until[gpu] < start)  /* the GPU ran no kernel for a while: a new stretch */
            load_since[gpu] = start;
        kernel_until[gpu] = start + seconds;
    }
    busy_until[gpu] = start + seconds;
    timeline += seconds;
    return busy_until[gpu];
}

void fg_advance_timeline(double seconds)
{
    timeline += seconds;
}

double fg_gpu_idle_at(int gpu)
{
    return busy_until[gpu];
}

void fg_log_launch(int gpu, const char *name, unsigned int gx, unsigned int bx, double seconds)
{
    if (!scn || !scn->launch_log[0])
        return;
    char line[256];
    int n = snprintf(line, sizeof line, "gpu=%d kernel=%s grid=%u block=%u seconds=%.9f\n", gpu,
                     name, gx, bx, seconds);
    int fd = open(scn->launch_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    /* one write per line with O_APPEND: lines of the children running at once never mix */
    if (write(fd, line, (size_t)n) != n)
        fprintf(stderr, "fakegpu: cannot append to cuda.launch_log %s\n", scn->launch_log);
    close(fd);
}

/* gpu.N.mem.dbe_under_test = COUNT: the GPU's first memory-test launch in this process
 * provokes COUNT uncorrectable ECC errors, as a weak cell under the test's patterns does: the
 * scenario file gains the counters NVML then reports (volatile and aggregate uncorrected,
 * a pending row remap) and `kernel_log` the driver's Xid 48 line, stamped with the monotonic
 * clock as dmesg prints it.  Appended with O_APPEND, one write each: children of other GPUs
 * may append at the same time. */
static unsigned char dbe_done[FG_MAX_GPUS];

static void append(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    size_t n = strlen(text);
    if (fd < 0 || write(fd, text, n) != (ssize_t)n)
        fprintf(stderr, "fakegpu: cannot append to %s\n", path);
    if (fd >= 0)
        close(fd);
}

void fg_memory_test_ran(int gpu)
{
    const fg_gpu *g = &scn->gpu[gpu];
    const char *path = getenv("FAKEGPU_SCENARIO");
    if (!g->dbe_under_test || dbe_done[gpu] || !path)
        return;
    dbe_done[gpu] = 1;
    char text[512];
    snprintf(text, sizeof text,
             "# gpu.%d.mem.dbe_under_test: the memory test provoked %u uncorrectable errors\n"
             "gpu.%d.ecc.volatile.uncorrected = %llu\ngpu.%d.ecc.aggregate.uncorrected = %llu\n"
             "gpu.%d.remap.pending = 1\n", gpu, g->dbe_under_test, gpu,
             (unsigned long long)g->ecc_vol_unc + g->dbe_under_test, gpu,
             (unsigned long long)g->ecc_agg_unc + g->dbe_under_test, gpu);
    append(path, text);
    if (scn->kernel_log[0]) {
        snprintf(text, sizeof text,
                 "[%.6f] NVRM: Xid (PCI:%04x:%02x:%02x): 48, pid=%d, name=python3, An uncorrectable "
                 "double bit error (DBE) has been detected on GPU in the framebuffer at partition 0, "
                 "subpartition 0.\n", fg_monotonic(), g->pci_domain, g->pci_bus, g->pci_device,
                 (int)getpid());
        append(scn->kernel_log, text);
    }
}

/* The clocks event reasons a GPU (scenario index) adds under load: for the fake NVML in the
 * same process (dlsym through dlopen(RTLD_NOLOAD)).  Bit 63: the GPU runs a kernel now. */
EXPORT unsigned long long fakegpu_load_reasons(int gpu)
{
    pthread_mutex_lock(&lock);
    unsigned long long r = 0;
    double now = fg_device_now();
    if (scn && gpu >= 0 && gpu < (int)scn->ngpus && now < kernel_until[gpu]) {
        r = 1ULL << 63;
        if (now - load_since[gpu] >= scn->gpu[gpu].throttle_after_s)
            r |= scn->gpu[gpu].throttle_under_load;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* ------------------------------------------------------------------ events */

EXPORT CUresult cuEventCreate(CUevent *ev, unsigned int flags)
{
    (void)flags;
    if (!ev)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(*ev = calloc(1, sizeof **ev)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(CUevent ev, void *stream)
{
    (void)stream;
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    int gpu;
    CUresult rc = current_gpu(&gpu);
    if (rc == CUDA_SUCCESS) {
        ev->at = timeline;
        ev->ready = busy_until[gpu];
        ev->recorded = 1;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuEventQuery(CUevent ev)
{
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    double ready = ev->recorded ? ev->ready : 0;
    pthread_mutex_unlock(&lock);
    return fg_device_now() >= ready ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

EXPORT CUresult cuEventSynchronize(CUevent ev)
{
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&lock);
    double ready = ev->recorded ? ev->ready : 0;
    pthread_mutex_unlock(&lock);
    fg_sleep_until(ready);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    if (!start || !end || !start->recorded || !end->recorded)
        return CUDA_ERROR_INVALID_HANDLE;
    double now = fg_device_now();
    if (now < end->ready || now < start->ready)
        return CUDA_ERROR_NOT_READY;    /* as the driver: an event not yet reached has no time */
    *ms = (float)((end->at - start->at) * 1000.0);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(CUevent ev)
{
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    free(ev);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy(CUevent ev)
{
    return cuEventDestroy_v2(ev);
}
