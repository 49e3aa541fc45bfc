#!/usr/bin/env python3
"""atheris target: tests/fakegpu/from_nvidia_smi.py convert() on untrusted `nvidia-smi -q -x` text.

    python3 tests/fuzz/fuzz_xml_replay.py -max_total_time=20 tests/fuzz/corpus/xml_replay

Invariants: scenario text or a ValueError (ET.ParseError and UnsafeXMLError are ValueErrors);
a document declaring entities is always refused; the scenario's size stays proportional to
the input (no entity expansion).
"""

import os
import sys
import xml.etree.ElementTree as ET

import _common
import atheris

sys.path.insert(0, os.path.join(_common.ROOT, "tests", "fakegpu"))
with atheris.instrument_imports():
    import from_nvidia_smi


def TestOneInput(data: bytes) -> None:
    data = _common.expand(data)
    text = _common.text(data)
    args = [data] + ([text] if "<" in text else [])  # a str without "<" is a path: not fuzzed
    for arg in args:
        try:
            out = from_nvidia_smi.convert(arg)
        except (ValueError, ET.ParseError):  # UnsafeXMLError is a ValueError too
            continue
        # XML spells the declaration exactly so; a parsed document must not have held one
        assert "<!ENTITY" not in text, "an entity declaration was parsed"
        assert len(out) <= 4096 + 2000 * len(data), len(out)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
