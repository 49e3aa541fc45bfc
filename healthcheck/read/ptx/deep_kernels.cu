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

/* HBM read bandwidth: every word read once; the sum is stored only if it hits a value no
 * buffer of ours produces, so the loads cannot be optimised away. */
HC_KERNEL hc_read(const u64 *buf, u64 n, u64 *sink)
{
    u64 acc = 0;
    for (u64 i = hc_first(); i < n; i += hc_stride())
        acc ^= buf[i];
    if (acc == 0x8badf00ddeadbeefULL)
        sink[0] = acc;
}

/* HBM copy bandwidth: n words read and n written. */
HC_KERNEL hc_copy(u64 *dst, const u64 *src, u64 n)
{
    for (u64 i = hc_first(); i < n; i += hc_stride())
        dst[i] = src[i];
}

/* Compute throughput: 8 independent FMA chains per thread, `iters` times: 16 iters
 * floating-point operations per thread.  The chains converge (m < 1), so no value overflows. */
HC_KERNEL hc_fma(float *out, unsigned int iters, float seed)
{
    u64 t = hc_first();
    float a0 = seed + (float)(t & 255) * 0.001f;
    float a1 = a0 + 1.0f, a2 = a0 + 2.0f, a3 = a0 + 3.0f;
    float a4 = a0 + 4.0f, a5 = a0 + 5.0f, a6 = a0 + 6.0f, a7 = a0 + 7.0f;
    const float m = 0.9999999f, c = 0.0000001f;
    for (unsigned int k = 0; k < iters; k++) {
        a0 = fmaf(a0, m, c);
        a1 = fmaf(a1, m, c);
        a2 = fmaf(a2, m, c);
        a3 = fmaf(a3, m, c);
        a4 = fmaf(a4, m, c);
        a5 = fmaf(a5, m, c);
        a6 = fmaf(a6, m, c);
        a7 = fmaf(a7, m, c);
    }
    out[t] = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
}
