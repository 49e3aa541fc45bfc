/*
 * fakegpu libcuda.so.1, the deep level: modules, kernel launches, occupancy, pinned host
 * memory, peer access and peer copies, and the device attributes a launch is sized by
 * (cuda_time.c keeps the device's time: events, synchronisation, the load NVML sees).
 *
 * cuModuleLoadData takes the PTX text the package ships; cuModuleGetFunction finds an entry
 * the PTX declares (".entry NAME(") and this file knows; cuLaunchKernel runs the host build of
 * the same sources (deep_kernels.cu and deep_tensor.cu through cuda_shim.h) over host copies
 * of the allocations its pointer arguments name, so the kernels' addressing and compare logic
 * run for real, on the fake's memory, stuck bits included (gpu.N.mem.stuck_bits).  A kernel
 * touching more than FG_KERNEL_MAX_BYTES fails with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: give
 * deep scenarios small GPUs (gpu.N.memory.total_mib).
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

typedef struct CUmod_st {
    char *image;                /* the PTX text, NUL-terminated */
} *CUmodule;

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
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217,
};

static unsigned char peer_on[FG_MAX_GPUS][FG_MAX_GPUS];

static void advance(double seconds)
{
    fg_advance_timeline(seconds);
}

static double rate(double gbps)
{
    return gbps > 0 ? gbps * 1e9 : 1e9;
}

/* A synchronous copy waits for the GPU's earlier work (stream order), and takes its time on
 * the timeline only: a --level full probe copies a whole board back, which would otherwise
 * sleep seconds per GPU in every test. */
double fg_account_copy(int gpu, size_t n, int dir)
{
    const fg_gpu *g = &scn->gpu[gpu];
    advance((double)n / rate(dir ? g->d2h_gbps : g->h2d_gbps));
    return fg_gpu_idle_at(gpu);
}

void fg_apply_stuck(const struct alloc *a, size_t off, unsigned char *dst, size_t n)
{
    const fg_gpu *g = &scn->gpu[a->gpu];
    for (unsigned int i = 0; i < g->nstuck; i++) {
        unsigned long long at = g->stuck_addr[i];
        if (at < a->fb_off + off || at - a->fb_off - off >= n)
            continue;
        unsigned char *b = dst + (at - a->fb_off - off);
        unsigned char bit = (unsigned char)(1u << g->stuck_bit[i]);
        *b = g->stuck_value[i] ? (unsigned char)(*b | bit) : (unsigned char)(*b & ~bit);
    }
}

/* ----------------------------------------------------------------- modules */

EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    int gpu;
    CUresult rc = current_gpu(&gpu);
    pthread_mutex_unlock(&lock);
    if (rc != CUDA_SUCCESS)
        return rc;
    const char *text = image;
    /* PTX is text with a .version and a .target line; anything else is not an image we know */
    const char *target = strstr(text, ".target sm_");
    if (!strstr(text, ".version ") || !target)
        return CUDA_ERROR_INVALID_IMAGE;
    /* the JIT refuses a PTX for a newer architecture than the GPU's (ptxas: "SM version
     * specified by .target is higher than default") */
    unsigned int sm = (unsigned int)strtoul(target + strlen(".target sm_"), NULL, 10);
    if (sm > scn->gpu[gpu].cc_major * 10 + scn->gpu[gpu].cc_minor)
        return CUDA_ERROR_INVALID_PTX;
    CUmodule m = calloc(1, sizeof *m);
    if (!m || !(m->image = strdup(text))) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *module = m;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleUnload(CUmodule module)
{
    if (!module)
        return CUDA_ERROR_INVALID_HANDLE;
    free(module->image);
    free(module);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule module, const char *name)
{
    if (!hfunc || !module || !name)
        return CUDA_ERROR_INVALID_VALUE;
    char decl[96];
    snprintf(decl, sizeof decl, ".entry %s(", name);
    if (!strstr(module->image, decl))
        return CUDA_ERROR_NOT_FOUND;
    for (size_t i = 0; i < NKERNELS; i++)
        if (strcmp(kernels[i].name, name) == 0) {
            *hfunc = &kernels[i];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;      /* declared in the PTX, but no host build of it here */
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
    double issued = fg_monotonic();   /* before the host build runs: the GPU starts now */
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

/* ------------------------------------------------------- pinned host memory */

EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags)
{
    (void)flags;
    if (!pp || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (posix_memalign(pp, 4096, bytesize))
        return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFreeHost(void *p)
{
    free(p);
    return CUDA_SUCCESS;
}

/* ----------------------------------------------------- attributes and peers */

enum { ATTR_MULTIPROCESSOR_COUNT = 16, ATTR_CC_MAJOR = 75, ATTR_CC_MINOR = 76 };

EXPORT CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev)
{
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    int gpu;
    CUresult rc = device_lookup(dev, NULL, &gpu);
    if (rc == CUDA_SUCCESS) {
        const fg_gpu *g = &scn->gpu[gpu];
        if (attrib == ATTR_MULTIPROCESSOR_COUNT)
            *pi = (int)g->sm_count;
        else if (attrib == ATTR_CC_MAJOR)
            *pi = (int)g->cc_major;
        else if (attrib == ATTR_CC_MINOR)
            *pi = (int)g->cc_minor;
        else
            rc = CUDA_ERROR_INVALID_VALUE;  /* documented: only these three */
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

/* Peers as the topology has them (scenario.c fg_p2p): NVLink links to each other, both on the
 * NVSwitch fabric, or both with PCIe peer to peer (gpu.N.p2p.pcie). */
EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
    if (!can)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    int a, b;
    CUresult rc = device_lookup(dev, NULL, &a);
    if (rc == CUDA_SUCCESS)
        rc = device_lookup(peer, NULL, &b);
    if (rc == CUDA_SUCCESS)
        *can = fg_p2p(scn, (unsigned int)a, (unsigned int)b) != FG_P2P_NONE;
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    pthread_mutex_lock(&lock);
    int me, other = peer ? ctx_index(peer) : -1;
    CUresult rc = current_gpu(&me);
    if (rc == CUDA_SUCCESS && (flags || other < 0 || ctxs[other].refs == 0))
        rc = flags ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_CONTEXT;
    if (rc == CUDA_SUCCESS && fg_p2p(scn, (unsigned int)me, (unsigned int)other) == FG_P2P_NONE)
        rc = CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    if (rc == CUDA_SUCCESS && peer_on[me][other])
        rc = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    if (rc == CUDA_SUCCESS)
        peer_on[me][other] = 1;
    pthread_mutex_unlock(&lock);
    return rc;
}

/* The rate of a peer copy from GPU sg to dg with peer access on: gpu.N.nvlink.peer.M.gbps
 * where set; else nvlink.peer_gbps (the slower side's) times the share of the source's links
 * that reach the other (direct links, or the NVSwitch fabric); over PCIe peer to peer, the
 * slower of the source's d2h and the destination's h2d. */
static double peer_rate(int sg, int dg)
{
    const fg_gpu *s = &scn->gpu[sg], *d = &scn->gpu[dg];
    double set = fg_peer_rate(s, (unsigned int)dg);
    if (set > 0)
        return set;
    double nvlink = s->peer_gbps < d->peer_gbps ? s->peer_gbps : d->peer_gbps;
    double links = s->nvlink_links ? (double)s->nvlink_links : 1;
    switch (fg_p2p(scn, (unsigned int)sg, (unsigned int)dg)) {
    case FG_P2P_NVLINK:
        return nvlink * fg_links_between(scn, (unsigned int)sg, (unsigned int)dg) / links;
    case FG_P2P_SWITCH: {
        unsigned int a = fg_switch_links(s), b = fg_switch_links(d);
        return nvlink * (a < b ? a : b) / links;
    }
    default:
        return s->d2h_gbps < d->h2d_gbps ? s->d2h_gbps : d->h2d_gbps;
    }
}

/* A copy between two GPUs' memory: at peer_rate with peer access enabled, else staged through
 * the host at the PCIe rates. */
EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src,
                             CUcontext src_ctx, size_t n)
{
    pthread_mutex_lock(&lock);
    int dg = dst_ctx ? ctx_index(dst_ctx) : -1, sg = src_ctx ? ctx_index(src_ctx) : -1;
    CUresult rc = initialised ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
    struct alloc *da = NULL, *sa = NULL;
    if (rc == CUDA_SUCCESS && (dg < 0 || sg < 0 || !ctxs[dg].refs || !ctxs[sg].refs))
        rc = CUDA_ERROR_INVALID_CONTEXT;
    if (rc == CUDA_SUCCESS && n && (!(da = find_range(dst, n)) || !(sa = find_range(src, n)) ||
                                    da->gpu != dg || sa->gpu != sg))
        rc = CUDA_ERROR_INVALID_VALUE;
    unsigned char *tmp = NULL;
    if (rc == CUDA_SUCCESS && n && !(tmp = malloc(n)))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS && n) {
        dev_read(sa, (size_t)(src - sa->base), tmp, n);
        rc = dev_write(da, (size_t)(dst - da->base), tmp, n);
        const fg_gpu *s = &scn->gpu[sg], *d = &scn->gpu[dg];
        if (peer_on[sg][dg] || peer_on[dg][sg])
            advance((double)n / rate(peer_rate(sg, dg)));
        else
            advance((double)n / rate(s->d2h_gbps) + (double)n / rate(d->h2d_gbps));
    }
    free(tmp);
    pthread_mutex_unlock(&lock);
    return rc;
}
