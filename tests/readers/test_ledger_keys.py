"""The repair ledger's key on what the fake driver reports: two GPUs whose serials differ only in
bytes that are not UTF-8 (555.x drivers gave such serials: pynvml#53) get a ledger each."""

from __future__ import annotations

import json
import subprocess
import sys


def test_repair_ledger_non_utf8_serials_from_the_fake_driver_get_two_ledgers(node):
    node.scenario.write_bytes(b"gpus = 2\ngpu.0.serial = 16\xe9\ngpu.1.serial = 16\xfc\n")
    code = ("import json; from healthcheck.read.nvml import read_nvml; "
            "from healthcheck.decide.repair import ledger_key; r = read_nvml(10); "
            "print(json.dumps([[g.serial, ledger_key(g)] for g in r.gpus]))")
    done = subprocess.run([sys.executable, "-c", code], env=node.env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    read = json.loads(done.stdout)
    assert [serial for serial, _ in read] == ["16\ufffd", "16\ufffd"]  # the reader's lenient decode
    keys = [key for _, key in read]
    assert len(set(keys)) == 2 and all(k.startswith("16_EF_BF_BD@0000-") for k in keys), keys
