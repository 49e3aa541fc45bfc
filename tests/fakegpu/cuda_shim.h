/*
 * The host build of healthcheck/read/ptx/deep_kernels.cu: what CUDA C gives a kernel (its
 * thread and block indices, atomicAdd, fmaf), in plain C, so the fake libcuda.so.1 runs the
 * very source the package ships as PTX.  cuda_deep.c sets the indices and calls a kernel once
 * per thread of the grid, each to its end (the source uses no shared memory and no barrier).
 */
#ifndef FAKEGPU_CUDA_SHIM_H
#define FAKEGPU_CUDA_SHIM_H

#include <math.h>

#define HC_HOST_BUILD 1
typedef unsigned long long u64;
typedef unsigned int u32;
/* CUDA's 16-byte vector type, as the 128-bit loads of hc_read and hc_copy see it */
typedef struct {
    u64 x, y;
} __attribute__((aligned(16))) ulonglong2;
typedef struct {
    unsigned int x, y, z;
} hc_dim3;

extern __thread hc_dim3 threadIdx, blockIdx, blockDim, gridDim;

#define HC_KERNEL void
#define HC_DEVICE static inline
/* One host thread runs a whole launch: no other thread adds at the same time. */
#define HC_ATOMIC_ADD(p, v) hc_atomic_add((p), (v))
static inline u64 hc_atomic_add(u64 *p, u64 v)
{
    u64 old = *p;
    *p = old + v;
    return old;
}

/* deep_tensor.cu's mma.sync m16n8k16 with every element of A `a` and of B `b` (the kernel makes
 * them so: the same packed pair in every register of every lane), so each accumulator element
 * gains the sum of 16 products a b, in FP32 as the tensor core accumulates. */
static inline float hc_host_unpack(const char *kind, u32 pair)
{
    unsigned int h = pair & 0xFFFFu;
    if (kind[0] == 'b') {       /* bf16: the high half of an FP32 */
        u32 bits = h << 16;
        float f;
        __builtin_memcpy(&f, &bits, sizeof f);
        return f;
    }
    int exp = (int)(h >> 10 & 0x1F), man = (int)(h & 0x3FF);   /* f16, IEEE binary16 */
    float f = exp == 0 ? ldexpf((float)man, -24) : ldexpf((float)(man | 0x400), exp - 25);
    return h & 0x8000u ? -f : f;
}

static inline void hc_host_mma(const char *kind, float d[4], u32 a, u32 b)
{
    float va = hc_host_unpack(kind, a), vb = hc_host_unpack(kind, b), p = 0;
    for (int k = 0; k < 16; k++)
        p += va * vb;
    for (int r = 0; r < 4; r++)
        d[r] += p;
}
#define HC_MMA(kind, d, a, b) hc_host_mma(kind, d, a, b)

#endif
