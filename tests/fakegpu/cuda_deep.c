/*
 * fakegpu libcuda.so.1, the deep level: modules, pinned host memory, the device attributes a
 * launch is sized by, peer access and peer copies (cuda_launch.c runs the kernels; cuda_time.c
 * keeps the device's time: events, synchronisation, the load NVML sees).
 *
 * cuModuleLoadData takes the PTX text the package ships; cuModuleGetFunction finds an entry
 * the PTX declares (".entry NAME(") that cuda_launch.c has a host build of.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

typedef struct CUmod_st {
    char *image;                /* the PTX text, NUL-terminated */
} *CUmodule;

typedef const void *CUfunction;   /* a kernel of cuda_launch.c */

enum {
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
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
    if ((*hfunc = fg_kernel_named(name)))
        return CUDA_SUCCESS;
    return CUDA_ERROR_NOT_FOUND;      /* declared in the PTX, but no host build of it here */
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
