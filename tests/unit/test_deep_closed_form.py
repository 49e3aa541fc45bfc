"""The closed forms the deep level checks every compute launch against (read/deepload.py), and
the memory test's size (read/deepmem.py), pure.  A closed form that FP32 cannot hold exactly
would fail healthy GPUs with action rma: these tests are what keeps the kernels' constants
honest."""

from __future__ import annotations

import struct

from hypothesis import given, strategies as st

from healthcheck.read.cudaprobe import MIB
from healthcheck.read.deepload import MMA_A, MMA_B, MMA_C, THREADS, fma_expected, mma_expected
from healthcheck.read.deepmem import memtest_bytes


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def test_every_value_of_the_fma_kernel_is_exact_in_fp32():
    """hc_fma's chains (deep_kernels.cu): x = 1 + lane/256, y_j = 1 + (j+1)/8, a_j = j + 0.5;
    each step's result must be an FP32 number, or FP32 rounds and the chain never comes back."""
    for lane in range(THREADS):
        x = 1.0 + lane / 256.0
        assert f32(x) == x
        for j in range(8):
            y, a = 1.0 + (j + 1) / 8.0, j + 0.5
            assert f32(x * y) == x * y and f32(a + x * y) == a + x * y
            assert (a + x * y) - x * y == a
    row = struct.unpack(f"<{THREADS}f", fma_expected())
    assert len(set(row)) == THREADS  # every lane its own answer: a lane swap shows


def test_the_mma_closed_form_is_exact_and_not_what_a_dead_unit_gives():
    v = MMA_C + 16 * MMA_A * MMA_B
    assert f32(MMA_A) == MMA_A and f32(MMA_B) == MMA_B and f32(16 * v) == 16 * v
    (first,) = set(struct.unpack(f"<{THREADS}f", mma_expected()))
    # neither c alone (a unit that ignores A B), nor 0, nor A B without c
    assert first == -240.0 and first not in (16 * MMA_C, 0.0, 16 * 16 * MMA_A * MMA_B)


@given(st.integers(0, 200 * 1024), st.integers(1, 200 * 1024), st.floats(0.01, 1.0), st.integers(0, 200 * 1024))
def test_the_memory_test_never_takes_what_co_tenants_hold(free_mib, total_mib, fraction, held_mib):
    free, total = min(free_mib, total_mib) * MIB, total_mib * MIB
    nbytes = memtest_bytes(free, total, fraction, held_mib)
    assert nbytes % MIB == 0 and nbytes <= free * fraction
    if held_mib:
        assert nbytes <= max(0, total - held_mib * MIB) // 2
