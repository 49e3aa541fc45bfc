#!/usr/bin/env python3
"""atheris target: healthcheck.read.gres (gres.conf and slurm.conf as slurmd reads them) and
decide.gpumap.map_gres_indices.

    python3 tests/fuzz/fuzz_gres.py -max_total_time=20 tests/fuzz/corpus/gres

The input is split at the first NUL into gres.conf and slurm.conf text.  Invariants:
parse_gres_conf never raises and gives either an error or files (each named by a File= of
the text); a layout with an error or an uncertainty maps no index; map_gres_indices never
raises and maps each index to a GPU that exists; read_conf on the text as a file either reads
it or raises ConfReadError naming the file.
"""

import os
import sys
import tempfile

import _common  # noqa: F401  (sys.path)
import atheris

with atheris.instrument_imports():
    from healthcheck.decide.gpumap import map_gres_indices
    from healthcheck.model import GpuSnapshot
    from healthcheck.read import gres, slurmconf

GPUS = [GpuSnapshot(index=i, minor_number=(i * 3) % 11, name="NVIDIA A100-SXM4-80GB" if i % 2 else "Tesla V100")
        for i in range(10)]
WORK = tempfile.mkdtemp(prefix="fuzz-gres-")


def TestOneInput(data: bytes) -> None:
    text = _common.text(data)
    gres_text, _, slurm_text = text.partition("\x00")
    counts = gres.slurm_conf_gres(slurm_text, "n1")
    layout = gres.parse_gres_conf(gres_text, "n1", "fuzz.conf", counts)
    assert (layout.error is None) or not layout.files, layout
    found, error = map_gres_indices([str(i) for i in range(12)], layout, GPUS)
    if layout.error or layout.uncertain:
        assert found == () and error, (layout, found)
    assert all(0 <= i < len(GPUS) for i in found), found
    path = os.path.join(WORK, "gres.conf")
    with open(path, "w") as handle:
        handle.write(gres_text)
    try:
        lines, _ = slurmconf.read_conf(path, WORK)
    except slurmconf.ConfReadError as exc:
        assert WORK in str(exc), exc
        return
    assert all(line.path.startswith(WORK) or os.path.isabs(line.path) for line in lines)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
