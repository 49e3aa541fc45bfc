/*
 * fakegpu libcuda.so.1: what cuda.c (context, memory, copies) shares with cuda_deep.c (modules,
 * launches, events, pinned host memory, peers: the deep level).  Hidden: nothing here is
 * exported from the library.
 */
#ifndef FAKEGPU_CUDA_INTERNAL_H
#define FAKEGPU_CUDA_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "scenario.h"

#pragma GCC visibility push(hidden)

#define EXPORT __attribute__((visibility("default")))

/* ----------------------------------------------- driver API declarations */

typedef int CUresult;                   /* enum cudaError_enum */
typedef int CUdevice;                   /* CUdevice_v1 */
typedef unsigned long long CUdeviceptr; /* CUdeviceptr_v2 on 64-bit hosts */
typedef struct CUctx_st *CUcontext;
typedef struct CUuuid_st {
    char bytes[16];
} CUuuid;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEVICE_UNAVAILABLE = 46,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_UNKNOWN = 999,
};

#define MIB (1024ULL * 1024ULL)
#define CHUNK ((size_t)64 * 1024)
#define VA_ALIGN (2ULL * MIB)


struct CUctx_st {
    unsigned int refs;      /* primary context retain count */
};

struct alloc {
    CUdeviceptr base;
    size_t size;
    size_t charged;
    unsigned long long fb_off;  /* where it lies in its GPU's memory (gpu.N.mem.stuck_bits) */         /* what it takes of the device: size rounded up to 2 MiB pages */
    int gpu;                /* scenario index */
    size_t nchunks;
    unsigned char **data;   /* per chunk: NULL = follows fill[] */
    uint32_t *fill;         /* per chunk: the 4-byte pattern (memory order) */
    struct alloc *next;
};

extern pthread_mutex_t lock;
extern fg_scenario *scn;
extern int initialised;
extern struct CUctx_st ctxs[FG_MAX_GPUS];
extern struct alloc *allocs;
extern unsigned long long allocated[FG_MAX_GPUS];
extern __thread CUcontext current;

CUresult device_lookup(CUdevice dev, fg_gpu *g, int *gpu);
int ctx_index(CUcontext ctx);
CUresult current_gpu(int *gpu);
struct alloc *find_range(CUdeviceptr p, size_t n);
size_t chunk_len(const struct alloc *a, size_t c);
void pattern_fill(unsigned char *dst, size_t n, uint32_t pat, size_t phase);
int materialise(struct alloc *a, size_t c);
/* gpu.N.mem.stuck_bits: force the stuck bits into dst, which holds [off, off+n) of a (cuda_deep.c) */
void fg_apply_stuck(const struct alloc *a, size_t off, unsigned char *dst, size_t n);

CUresult dev_write(struct alloc *a, size_t off, const unsigned char *src, size_t n);
void dev_read(const struct alloc *a, size_t off, unsigned char *dst, size_t n);
/* The device's time (cuda_time.c; lock held unless said).  fg_device_work: `seconds` of work
 * (a kernel when `kernel`) issued at `issued` (fg_device_now) to GPU gpu, queued after its earlier
 * work: returns when it ends (device clock).  fg_gpu_idle_at: when the GPU's queued work ends.
 * fg_sleep_until: wait (lock NOT held) until then.  fg_account_copy (cuda_deep.c): a copy of n
 * bytes to (dir 0) or from (1) the GPU at gpu.N.perf.h2d_gbps (d2h_gbps) on the timeline:
 * returns when the GPU's earlier work ends, which a synchronous copy waits for. */
double fg_monotonic(void);
/* The device clock the GPUs' queues run on: the host's monotonic clock less the host stalls
 * cuda.pause_on_stall_s detected (cuda_time.c). */
double fg_device_now(void);
double fg_device_work(int gpu, double seconds, double issued, int kernel);
double fg_gpu_idle_at(int gpu);
void fg_advance_timeline(double seconds);
void fg_sleep_until(double when);
void fg_log_launch(int gpu, const char *name, unsigned int gx, unsigned int bx, double seconds);
double fg_account_copy(int gpu, size_t n, int dir);
/* the kernel of that name (cuda_launch.c), NULL when the fake has no host build of it */
const void *fg_kernel_named(const char *name);
/* the memory test ran on a GPU (cuda_time.c): gpu.N.mem.dbe_under_test's errors appear */
void fg_memory_test_ran(int gpu);

#pragma GCC visibility pop

#endif
