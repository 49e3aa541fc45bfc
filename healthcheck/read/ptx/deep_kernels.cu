/*
 * gpu-healthcheck --level deep: the on-device kernels, in one readable source.
 *
 * `make ptx` compiles this file with NVRTC (PyPI nvidia-cuda-nvrtc-cu12) to deep_kernels.ptx
 * for compute_70 (PTX ISA 7.0 and up), which the package ships and the driver JIT-compiles
 * for whatever GPU it runs on (Volta to Blackwell) through cuModuleLoadData: nothing but
 * libcuda.so.1 is needed on the node.  The same file builds on the host for the fake GPUs
 * (tests/fakegpu/cuda_shim.h defines HC_HOST_BUILD and the thread and block indices), so the
 * addressing and compare logic run on every CI run, not only on a GPU.
 *
 * Rules that keep both builds the same program: plain C (no templates, no references),
 * no shared memory and no __syncthreads() (the host build runs each thread to its end in
 * turn), grid-stride loops (any grid covers the whole buffer), and every device-to-host
 * result through one global array written with atomicAdd.
 *
 * Memory words are 64 bits: an address-in-address word holds its whole device address, so a
 * fault that aliases addresses 4 GiB apart is caught too.
 */
#ifndef HC_HOST_BUILD
typedef unsigned long long u64;
#define HC_KERNEL extern "C" __global__ void
#define HC_DEVICE static __device__ __forceinline__
#define HC_ATOMIC_ADD(p, v) atomicAdd((p), (v))
#endif

/* Failing words recorded per pass: only the count and these come back to the host. */
#define HC_MAX_RECORDS 8

/* result[0]: failing words; result[1 + 3k .. 3 + 3k]: index, expected, actual of the k-th. */
HC_DEVICE void hc_record(u64 *result, u64 i, u64 expected, u64 actual)
{
    u64 slot = HC_ATOMIC_ADD(result, 1ULL);
    if (slot < HC_MAX_RECORDS) {
        result[1 + 3 * slot] = i;
        result[2 + 3 * slot] = expected;
        result[3 + 3 * slot] = actual;
    }
}

HC_DEVICE u64 hc_first(void)
{
    return (u64)blockIdx.x * blockDim.x + threadIdx.x;
}

HC_DEVICE u64 hc_stride(void)
{
    return (u64)gridDim.x * blockDim.x;
}

/* Address in address: word i holds its own device address (tag + 8 i), XOR flip. */
HC_KERNEL hc_addr_write(u64 *buf, u64 n, u64 tag, u64 flip)
{
    for (u64 i = hc_first(); i < n; i += hc_stride())
        buf[i] = (tag + 8 * i) ^ flip;
}

HC_KERNEL hc_addr_check(const u64 *buf, u64 n, u64 tag, u64 flip, u64 *result)
{
    for (u64 i = hc_first(); i < n; i += hc_stride()) {
        u64 want = (tag + 8 * i) ^ flip, got = buf[i];
        if (got != want)
            hc_record(result, i, want, got);
    }
}

/* Moving inversions: fill with a pattern, then read-verify-write its complement word by word,
 * ascending and then descending, so a cell disturbed by its neighbours' writes is caught. */
HC_KERNEL hc_mi_fill(u64 *buf, u64 n, u64 pattern)
{
    for (u64 i = hc_first(); i < n; i += hc_stride())
        buf[i] = pattern;
}

HC_KERNEL hc_mi_step(u64 *buf, u64 n, u64 expect, u64 write, unsigned int descending, u64 *result)
{
    for (u64 k = hc_first(); k < n; k += hc_stride()) {
        u64 i = descending ? n - 1 - k : k;
        u64 got = buf[i];
        if (got != expect)
            hc_record(result, i, expect, got);
        buf[i] = write;
    }
}

/* Walking ones and zeros: word i holds one bit set, at (i + shift) mod 64, and every other word
 * (by parity) its complement, so neighbouring words drive a lone 1 and a lone 0 on different
 * data lines.  After hc_walk_fill (shift 0), hc_walk sweeps the whole buffer 64 times, each
 * sweep checking `shift` and writing `shift + 1`, so every bit of every word is walked.  One
 * launch for the 64 sweeps: each thread's share of the buffer is far larger than the L2
 * cache, so every check reads what DRAM kept since the previous sweep. */
HC_DEVICE u64 hc_walk_word(u64 i, u64 shift, u64 parity)
{
    u64 bit = 1ULL << ((i + shift) & 63);
    return ((i ^ parity) & 1) ? ~bit : bit;
}

HC_KERNEL hc_walk_fill(u64 *buf, u64 n, u64 parity)
{
    for (u64 i = hc_first(); i < n; i += hc_stride())
        buf[i] = hc_walk_word(i, 0, parity);
}

HC_KERNEL hc_walk(u64 *buf, u64 n, u64 parity, u64 *result)
{
    for (u64 shift = 0; shift < 64; shift++)
        for (u64 i = hc_first(); i < n; i += hc_stride()) {
            u64 want = hc_walk_word(i, shift, parity), got = buf[i];
            if (got != want)
                hc_record(result, i, want, got);
            buf[i] = hc_walk_word(i, shift + 1, parity);
        }
}

/* Random data: word i holds a hash of (seed, i) (splitmix64's finaliser), a pattern with no
 * structure a fault could hide behind. */
HC_DEVICE u64 hc_mix(u64 seed, u64 i)
{
    u64 z = seed + (i + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

HC_KERNEL hc_rand_write(u64 *buf, u64 n, u64 seed)
{
    for (u64 i = hc_first(); i < n; i += hc_stride())
        buf[i] = hc_mix(seed, i);
}

HC_KERNEL hc_rand_check(const u64 *buf, u64 n, u64 seed, u64 *result)
{
    for (u64 i = hc_first(); i < n; i += hc_stride()) {
        u64 want = hc_mix(seed, i), got = buf[i];
        if (got != want)
            hc_record(result, i, want, got);
    }
}

/* HBM read bandwidth: n 16-byte vectors, each read once, four independent 128-bit loads in
 * flight per thread (one 8-byte load at a time cannot keep HBM3e busy: too few bytes in flight
 * per SM).  The sum is stored only if it hits a value no buffer of ours produces, so the loads
 * cannot be optimised away. */
HC_KERNEL hc_read(const ulonglong2 *buf, u64 n, u64 *sink)
{
    u64 acc = 0, s = hc_stride(), i = hc_first();
    for (; i + 3 * s < n; i += 4 * s) {
        ulonglong2 v0 = buf[i], v1 = buf[i + s], v2 = buf[i + 2 * s], v3 = buf[i + 3 * s];
        acc ^= (v0.x ^ v0.y) ^ (v1.x ^ v1.y) ^ (v2.x ^ v2.y) ^ (v3.x ^ v3.y);
    }
    for (; i < n; i += s)
        acc ^= buf[i].x ^ buf[i].y;
    if (acc == 0x8badf00ddeadbeefULL)
        sink[0] = acc;
}

/* HBM copy bandwidth: n 16-byte vectors read and n written, four loads in flight per thread. */
HC_KERNEL hc_copy(ulonglong2 *dst, const ulonglong2 *src, u64 n)
{
    u64 s = hc_stride(), i = hc_first();
    for (; i + 3 * s < n; i += 4 * s) {
        ulonglong2 v0 = src[i], v1 = src[i + s], v2 = src[i + 2 * s], v3 = src[i + 3 * s];
        dst[i] = v0;
        dst[i + s] = v1;
        dst[i + 2 * s] = v2;
        dst[i + 3 * s] = v3;
    }
    for (; i < n; i += s)
        dst[i] = src[i];
}

/* Compute under load, with an answer to check: 8 independent FMA chains per thread.  Each
 * iteration adds x y_j to chain j and takes it away again (fma(x, y, a), then fma(-x, y, a)):
 * with x = 1 + lane/256 and y_j = 1 + (j+1)/8 every value has at most 18 significant bits, so
 * IEEE FP32 computes both steps exactly and the chain comes back to where it started.  One
 * last fma(x, y_j, a_j) and the sum of the chains make each thread's output a closed form of
 * its lane (threadIdx.x), whatever `iters` is: out = sum_j (j + 0.5 + x y_j).  A wrong FMA
 * anywhere leaves its error in the output.  32 floating-point operations per iteration per
 * thread.  No value depends on another thread: no block, SM or launch can mask another. */
/* One FMA on each of the 8 chains: a_j = fma(m, y_j, a_j). */
#define HC_FMA8(m)                                                                             \
    do {                                                                                       \
        a0 = fmaf(m, y0, a0);                                                                  \
        a1 = fmaf(m, y1, a1);                                                                  \
        a2 = fmaf(m, y2, a2);                                                                  \
        a3 = fmaf(m, y3, a3);                                                                  \
        a4 = fmaf(m, y4, a4);                                                                  \
        a5 = fmaf(m, y5, a5);                                                                  \
        a6 = fmaf(m, y6, a6);                                                                  \
        a7 = fmaf(m, y7, a7);                                                                  \
    } while (0)

HC_KERNEL hc_fma(float *out, unsigned int iters)
{
    float x = 1.0f + (float)(threadIdx.x & 255) * 0.00390625f, nx = -x;
    float a0 = 0.5f, a1 = 1.5f, a2 = 2.5f, a3 = 3.5f, a4 = 4.5f, a5 = 5.5f, a6 = 6.5f, a7 = 7.5f;
    const float y0 = 1.125f, y1 = 1.25f, y2 = 1.375f, y3 = 1.5f;
    const float y4 = 1.625f, y5 = 1.75f, y6 = 1.875f, y7 = 2.0f;
    for (unsigned int k = 0; k < iters; k++) {
        HC_FMA8(x);
        HC_FMA8(nx);
    }
    HC_FMA8(x);
    out[hc_first()] = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
}

/* A compute kernel's output against its closed form: out[i] must hold the bits of
 * expect[i % period] (the host computes them); how many do not is added to count[0].  One
 * runs after every compute launch, into that launch's own counter, so the host reads every
 * launch's verdict at the end without stopping the load to copy outputs back. */
HC_KERNEL hc_check(const unsigned int *out, u64 n, const unsigned int *expect, unsigned int period,
                   u64 *count)
{
    for (u64 i = hc_first(); i < n; i += hc_stride())
        if (out[i] != expect[i % period])
            HC_ATOMIC_ADD(count, 1ULL);
}
