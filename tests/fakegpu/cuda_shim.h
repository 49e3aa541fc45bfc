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

#endif
