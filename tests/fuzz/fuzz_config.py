#!/usr/bin/env python3
"""atheris target: healthcheck.config.parse_config on untrusted TOML text.

    python3 tests/fuzz/fuzz_config.py -max_total_time=20 tests/fuzz/corpus/config

Invariant: a Config or a ConfigError naming the path, nothing else.  A Config obeys the
schema's bounds (non-negative counts, fractions within 0..1, known check ids).
"""

import sys

import _common  # noqa: F401  (sys.path)
import atheris

with atheris.instrument_imports():
    try:  # instrumented too: coverage inside the TOML parser guides the fuzzer
        import tomllib  # noqa: F401
    except ModuleNotFoundError:  # Python < 3.11
        import tomli  # noqa: F401
    from healthcheck import config as cfg
    from healthcheck.checks import CATALOGUE


def TestOneInput(data: bytes) -> None:
    text = _common.text(data)
    try:
        conf = cfg.parse_config(text, "/etc/fuzz.toml", CATALOGUE)
    except cfg.ConfigError as exc:
        assert str(exc).startswith("/etc/fuzz.toml: "), str(exc)
        return
    assert conf.source == "/etc/fuzz.toml"
    assert 0.0 <= conf.drain.max_fraction <= 1.0 and 0.0 <= conf.probe.full_fraction <= 1.0
    assert conf.history_max_bytes >= 0 and conf.probe.quick_mib >= 0
    assert all(c in CATALOGUE for c in conf.checks.disabled)
    conf.history_path()


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
