/*
 * fakegpu libcuda.so.1, kernel launches: the host build of the deep level's kernels
 * (healthcheck/read/ptx/deep_kernels.cu and deep_tensor.cu through cuda_shim.h), run by
 * cuLaunchKernel over host copies of the allocations its pointer arguments name, the time each
 * launch takes at the scenario's speeds, and cuOccupancyMaxActiveBlocksPerMultiprocessor
 * (cuda_deep.c has the modules that name these kernels; cuda_time.c the device's time).
 *
 * The compute kernels (hc_fma, hc_mma_*) are closed forms: their output does not depend on the
 * iteration count (each iteration adds a product and takes it away again).  The host build runs
 * their first block with at most FG_COMPUTE_ITERS iterations (the full grid is billions of
 * FMAs, seconds per GPU on a host) and every other block gets its output, as every block
 * computes the same; gpu.N.compute.wrong = COUNT then flips the lowest bit of COUNT elements.
 * Their time on the device timeline is the full count's, at gpu.N.perf.gflops (tensor_gflops).
 */
#define _GNU_SOURCE
#include <math.h>   /* fmaf, for the kernels: outside the hidden block below */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

#pragma GCC visibility push(hidden)
#include "cuda_shim.h"
__thread hc_dim3 threadIdx, blockIdx, blockDim, gridDim;
#include "../../healthcheck/read/ptx/deep_kernels.cu"
#include "../../healthcheck/read/ptx/deep_tensor.cu"
#pragma GCC visibility pop

#define FG_KERNEL_MAX_BYTES (2ULL << 30)
#define MAX_PTR_ARGS 4
#define MAX_PARAMS 6
#define FG_COMPUTE_ITERS 16u
#define FG_MAX_BLOCKS_PER_SM 32     /* resident blocks per SM, sm_80 and sm_90 */

enum { P_PTR, P_U64, P_U32, P_F32 };

struct kernel {
    const char *name;
    int nparams;
    int kind[MAX_PARAMS];
};

enum {
    K_ADDR_WRITE, K_ADDR_CHECK, K_MI_FILL, K_MI_STEP, K_WALK_FILL, K_WALK, K_RAND_WRITE,
    K_RAND_CHECK, K_READ, K_COPY, K_FMA, K_MMA_BF16, K_MMA_F16, K_CHECK,
};

static const struct kernel kernels[] = {
    [K_ADDR_WRITE] = {"hc_addr_write", 4, {P_PTR, P_U64, P_U64, P_U64}},
    [K_ADDR_CHECK] = {"hc_addr_check", 5, {P_PTR, P_U64, P_U64, P_U64, P_PTR}},
    [K_MI_FILL] = {"hc_mi_fill", 3, {P_PTR, P_U64, P_U64}},
    [K_MI_STEP] = {"hc_mi_step", 6, {P_PTR, P_U64, P_U64, P_U64, P_U32, P_PTR}},
    [K_WALK_FILL] = {"hc_walk_fill", 3, {P_PTR, P_U64, P_U64}},
    [K_WALK] = {"hc_walk", 4, {P_PTR, P_U64, P_U64, P_PTR}},
    [K_RAND_WRITE] = {"hc_rand_write", 3, {P_PTR, P_U64, P_U64}},
    [K_RAND_CHECK] = {"hc_rand_check", 4, {P_PTR, P_U64, P_U64, P_PTR}},
    [K_READ] = {"hc_read", 3, {P_PTR, P_U64, P_PTR}},
    [K_COPY] = {"hc_copy", 3, {P_PTR, P_PTR, P_U64}},
    [K_FMA] = {"hc_fma", 2, {P_PTR, P_U32}},
    [K_MMA_BF16] = {"hc_mma_bf16", 5, {P_PTR, P_U32, P_U32, P_U32, P_F32}},
    [K_MMA_F16] = {"hc_mma_f16", 5, {P_PTR, P_U32, P_U32, P_U32, P_F32}},
    [K_CHECK] = {"hc_check", 5, {P_PTR, P_U64, P_PTR, P_U32, P_PTR}},
};
#define NKERNELS (sizeof kernels / sizeof kernels[0])

typedef const struct kernel *CUfunction;

enum {
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
};

static double rate(double gbps)
{
    return gbps > 0 ? gbps * 1e9 : 1e9;
}

const void *fg_kernel_named(const char *name)
{
    for (size_t i = 0; i < NKERNELS; i++)
        if (strcmp(kernels[i].name, name) == 0)
            return &kernels[i];
    return NULL;
}

/* ---------------------------------------------------------------- launches */

struct staged {
    struct alloc *a;
    unsigned char *flat;        /* the whole allocation, as the kernel sees it */
};

/* Write a kernel's view of an allocation back: a 64 KiB chunk that holds one 4-byte pattern
 * again goes back to costing nothing. */
static CUresult unstage(struct staged *s)
{
    struct alloc *a = s->a;
    CUresult rc = CUDA_SUCCESS;
    for (size_t c = 0; c < a->nchunks; c++) {
        unsigned char *p = s->flat + c * CHUNK;
        size_t len = chunk_len(a, c);
        if (len >= 4 && len % 4 == 0 && memcmp(p, p + 4, len - 4) == 0) {
            free(a->data[c]);
            a->data[c] = NULL;
            memcpy(&a->fill[c], p, 4);
        } else if (materialise(a, c) == 0) {
            memcpy(a->data[c], p, len);
        } else {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    free(s->flat);
    return rc;
}

static int is_compute(const struct kernel *k)
{
    return k == &kernels[K_FMA] || k == &kernels[K_MMA_BF16] || k == &kernels[K_MMA_F16];
}

static void run_grid(const struct kernel *k, unsigned int gx, unsigned int bx, void *const *arg)
{
    gridDim = (hc_dim3){gx, 1, 1};
    blockDim = (hc_dim3){bx, 1, 1};
    unsigned int blocks = is_compute(k) ? 1 : gx;
    /* a closed form: the first block, with fewer iterations, computes what the full count does */
    unsigned int iters = 0;
    if (is_compute(k))
        iters = *(const unsigned int *)arg[1] > FG_COMPUTE_ITERS ? FG_COMPUTE_ITERS
                                                                 : *(const unsigned int *)arg[1];
    for (unsigned int b = 0; b < blocks; b++)
        for (unsigned int t = 0; t < bx; t++) {
            blockIdx = (hc_dim3){b, 0, 0};
            threadIdx = (hc_dim3){t, 0, 0};
#define U64(i) (*(const u64 *)arg[i])
#define U32(i) (*(const unsigned int *)arg[i])
#define F32(i) (*(const float *)arg[i])
#define PTR(i, T) ((T *)arg[i])
            switch (k - kernels) {
            case K_ADDR_WRITE: hc_addr_write(PTR(0, u64), U64(1), U64(2), U64(3)); break;
            case K_ADDR_CHECK: hc_addr_check(PTR(0, u64), U64(1), U64(2), U64(3), PTR(4, u64)); break;
            case K_MI_FILL: hc_mi_fill(PTR(0, u64), U64(1), U64(2)); break;
            case K_MI_STEP: hc_mi_step(PTR(0, u64), U64(1), U64(2), U64(3), U32(4), PTR(5, u64)); break;
            case K_WALK_FILL: hc_walk_fill(PTR(0, u64), U64(1), U64(2)); break;
            case K_WALK: hc_walk(PTR(0, u64), U64(1), U64(2), PTR(3, u64)); break;
            case K_RAND_WRITE: hc_rand_write(PTR(0, u64), U64(1), U64(2)); break;
            case K_RAND_CHECK: hc_rand_check(PTR(0, u64), U64(1), U64(2), PTR(3, u64)); break;
            case K_READ: hc_read(PTR(0, ulonglong2), U64(1), PTR(2, u64)); break;
            case K_COPY: hc_copy(PTR(0, ulonglong2), PTR(1, ulonglong2), U64(2)); break;
            case K_FMA: hc_fma(PTR(0, float), iters); break;
            case K_MMA_BF16: hc_mma_bf16(PTR(0, float), iters, U32(2), U32(3), F32(4)); break;
            case K_MMA_F16: hc_mma_f16(PTR(0, float), iters, U32(2), U32(3), F32(4)); break;
            case K_CHECK: hc_check(PTR(0, unsigned int), U64(1), PTR(2, unsigned int), U32(3), PTR(4, u64)); break;
            }
#undef U64
#undef U32
#undef F32
#undef PTR
        }
}

/* A compute kernel's output: every block gets the first block's, then gpu.N.compute.wrong
 * elements (the last ones) have their lowest bit flipped, a silent wrong answer. */
static void spread_output(const struct kernel *k, const fg_gpu *g, unsigned int gx, unsigned int bx,
                          void *const *arg)
{
    if (!is_compute(k))
        return;
    float *out = (float *)arg[0];
    for (unsigned int b = 1; b < gx; b++)
        memcpy(out + (size_t)b * bx, out, bx * sizeof *out);
    size_t total = (size_t)gx * bx;
    for (size_t i = 0; i < g->compute_wrong && i < total; i++) {
        uint32_t bits;
        memcpy(&bits, &out[total - 1 - i], sizeof bits);
        bits ^= 1u;
        memcpy(&out[total - 1 - i], &bits, sizeof bits);
    }
}

/* Seconds the launch takes on the device timeline, from the scenario's speeds. */
static double launch_seconds(const struct kernel *k, const fg_gpu *g, unsigned int gx,
                             unsigned int bx, void *const *arg)
{
    double words = k->nparams > 1 && k->kind[1] == P_U64 ? (double)*(const u64 *)arg[1] : 0;
    double threads = (double)gx * bx;
    switch (k - kernels) {
    case K_MI_STEP: /* each word read and written */
        return 16.0 * words / rate(g->hbm_gbps);
    case K_WALK: /* 64 sweeps, each word read and written */
        return 64.0 * 16.0 * words / rate(g->hbm_gbps);
    case K_CHECK: /* n 4-byte elements read */
        return 4.0 * words / rate(g->hbm_gbps);
    case K_READ: /* n 16-byte vectors read */
        return 16.0 * words / rate(g->hbm_gbps);
    case K_COPY: /* n vectors read, n written */
        return 32.0 * (double)*(const u64 *)arg[2] / rate(g->hbm_gbps);
    case K_FMA: /* 16 FMAs (32 flops) per iteration per thread */
        return 32.0 * threads * *(const unsigned int *)arg[1] / rate(g->gflops);
    case K_MMA_BF16: case K_MMA_F16: /* 8 m16n8k16 (8 x 4096 flops) per iteration per warp */
        return 8.0 * 4096.0 * (threads / 32.0) * *(const unsigned int *)arg[1] / rate(g->tensor_gflops);
    default: /* each word written, or read */
        return 8.0 * words / rate(g->hbm_gbps);
    }
}

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                               unsigned int bx, unsigned int by, unsigned int bz,
                               unsigned int shared, void *stream, void **params, void **extra)
{
    (void)stream;
    int known = 0;
    for (size_t i = 0; i < NKERNELS; i++)
        known |= f == &kernels[i];
    if (!known)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!params || extra || gx == 0 || bx == 0 || gy != 1 || gz != 1 || by != 1 || bz != 1 ||
        bx > 1024 || shared)
        return CUDA_ERROR_INVALID_VALUE;
    double issued = fg_device_now();  /* before the host build runs: the GPU starts now */
    pthread_mutex_lock(&lock);
    int gpu;
    CUresult rc = current_gpu(&gpu);
    struct staged staged[MAX_PTR_ARGS];
    int nstaged = 0;
    void *arg[MAX_PARAMS];
    unsigned long long total = 0;
    for (int i = 0; rc == CUDA_SUCCESS && i < f->nparams; i++) {
        arg[i] = params[i];
        if (f->kind[i] != P_PTR)
            continue;
        CUdeviceptr p = *(const CUdeviceptr *)params[i];
        struct alloc *a = find_range(p, 1);
        if (!a || a->gpu != gpu) {
            rc = CUDA_ERROR_INVALID_VALUE;  /* a real GPU would fault: 700, illegal address */
            break;
        }
        int s;
        for (s = 0; s < nstaged && staged[s].a != a; s++)
            ;
        if (s == nstaged) {
            total += a->size;
            if (total > FG_KERNEL_MAX_BYTES) {
                rc = CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
                break;
            }
            staged[s].a = a;
            if (!(staged[s].flat = malloc(a->size))) {
                rc = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            dev_read(a, 0, staged[s].flat, a->size);
            nstaged++;
        }
        /* the kernel gets a pointer to a host pointer, as CUDA passes a device pointer */
        static __thread unsigned char *host[MAX_PARAMS];
        host[i] = staged[s].flat + (p - a->base);
        arg[i] = &host[i];
    }
    if (rc == CUDA_SUCCESS) {
        /* arg[i] of a pointer parameter points to the host pointer; run_grid wants the pointer */
        void *direct[MAX_PARAMS];
        for (int i = 0; i < f->nparams; i++)
            direct[i] = f->kind[i] == P_PTR ? *(void **)arg[i] : arg[i];
        run_grid(f, gx, bx, direct);
        spread_output(f, &scn->gpu[gpu], gx, bx, direct);
        double seconds = launch_seconds(f, &scn->gpu[gpu], gx, bx, direct);
        fg_device_work(gpu, seconds, issued, 1);
        fg_log_launch(gpu, f->name, gx, bx, seconds);
        if (f == &kernels[K_ADDR_CHECK])
            fg_memory_test_ran(gpu);
    }
    for (int s = 0; s < nstaged; s++) {
        CUresult u = unstage(&staged[s]);
        if (rc == CUDA_SUCCESS)
            rc = u;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Blocks of `block` threads one SM holds at once: the SM's threads (gpu.N.cuda.max_threads_per_sm,
 * 2048 on sm_70/80/90, 1536 on sm_86/89/120) over the block's, at most 32 (registers and shared
 * memory never bind for the deep level's kernels). */
EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, CUfunction f, int block,
                                                            size_t shared)
{
    int known = 0;
    for (size_t i = 0; i < NKERNELS; i++)
        known |= f == &kernels[i];
    if (!blocks || block <= 0 || block > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (!known)
        return CUDA_ERROR_INVALID_HANDLE;
    (void)shared;
    pthread_mutex_lock(&lock);
    int gpu;
    CUresult rc = current_gpu(&gpu);
    if (rc == CUDA_SUCCESS) {
        int n = (int)scn->gpu[gpu].max_threads_per_sm / block;
        *blocks = n > FG_MAX_BLOCKS_PER_SM ? FG_MAX_BLOCKS_PER_SM : n;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}
