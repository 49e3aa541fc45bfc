/*
 * gpu-healthcheck --level deep: the tensor-core kernels (sm_80 and newer), in one readable
 * source beside deep_kernels.cu.
 *
 * `make ptx` compiles this file with NVRTC for compute_80 to deep_tensor.ptx (PTX ISA 7.0, the
 * first with mma.sync.aligned.m16n8k16 for .bf16 and .f16; CUDA 11.0, driver R450), which the
 * package ships beside deep_kernels.ptx and loads only on a GPU of compute capability 8.0 or
 * more.  The same file builds on the host for the fake GPUs (tests/fakegpu/cuda_shim.h), where
 * HC_MMA is plain C.
 *
 * Each warp runs four independent m16n8k16 accumulators.  Every element of A is `a` and every
 * element of B is `b` (the operands are the same in every lane, so no fragment layout is
 * involved), so each mma adds 16 a b to every accumulator element.  Each iteration adds A B
 * and then (-A) B: with a = 1.5, b = -0.75, c = 3 every value is a small integer or half,
 * exact in the FP32 accumulator, and the accumulators come back to c.  A last A B and the sum
 * of the 16 accumulator elements make each thread's output the closed form 16 (c + 16 a b),
 * whatever `iters` is.  One iteration is 8 mma per warp, 8 x 4096 floating-point operations.
 */
#ifndef HC_HOST_BUILD
typedef unsigned int u32;
#define HC_KERNEL extern "C" __global__ void
#define HC_MMA(kind, d, a, b)                                                                  \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." kind "." kind ".f32 "                \
                 "{%0, %1, %2, %3}, {%4, %4, %4, %4}, {%5, %5}, {%0, %1, %2, %3};"              \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                               \
                 : "r"(a), "r"(b))
#endif

/* The sign bits of both halves of a packed pair: -A from A. */
#define HC_NEGATE_PAIR 0x80008000u

#define HC_MMA_KERNEL(name, kind)                                                              \
    HC_KERNEL name(float *out, unsigned int iters, u32 a, u32 b, float c)                      \
    {                                                                                          \
        u32 na = a ^ HC_NEGATE_PAIR;                                                           \
        float d0[4] = {c, c, c, c}, d1[4] = {c, c, c, c};                                      \
        float d2[4] = {c, c, c, c}, d3[4] = {c, c, c, c};                                      \
        for (unsigned int k = 0; k < iters; k++) {                                             \
            HC_MMA(kind, d0, a, b);                                                            \
            HC_MMA(kind, d1, a, b);                                                            \
            HC_MMA(kind, d2, a, b);                                                            \
            HC_MMA(kind, d3, a, b);                                                            \
            HC_MMA(kind, d0, na, b);                                                           \
            HC_MMA(kind, d1, na, b);                                                           \
            HC_MMA(kind, d2, na, b);                                                           \
            HC_MMA(kind, d3, na, b);                                                           \
        }                                                                                      \
        HC_MMA(kind, d0, a, b);                                                                \
        HC_MMA(kind, d1, a, b);                                                                \
        HC_MMA(kind, d2, a, b);                                                                \
        HC_MMA(kind, d3, a, b);                                                                \
        float s0 = (d0[0] + d0[1]) + (d0[2] + d0[3]), s1 = (d1[0] + d1[1]) + (d1[2] + d1[3]);  \
        float s2 = (d2[0] + d2[1]) + (d2[2] + d2[3]), s3 = (d3[0] + d3[1]) + (d3[2] + d3[3]);  \
        out[(unsigned long long)blockIdx.x * blockDim.x + threadIdx.x] = (s0 + s1) + (s2 + s3); \
    }

/* BF16 and FP16 inputs, FP32 accumulate: a, b are packed pairs of one value each. */
HC_MMA_KERNEL(hc_mma_bf16, "bf16")
HC_MMA_KERNEL(hc_mma_f16, "f16")
