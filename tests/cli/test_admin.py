"""`--list-checks` and `--check-config`, through the CLI's main() in-process.

The config tests always name a file (--config or GPU_HEALTHCHECK_CONFIG): the default path is
the host's /etc/gpu-healthcheck/config.toml, which no test may read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Tuple

import pytest

from healthcheck.checks import CATALOGUE, INTERNODE
from healthcheck.cli import main
from healthcheck.config import describe_schema
from healthcheck.model import Action, Severity

CONFIG_KEYS = {key for key, _type, _default in describe_schema()}


def _run(capsys: pytest.CaptureFixture, *argv: str) -> Tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_every_registered_check_is_listed_with_its_docstrings_first_sentence(capsys) -> None:
    rc, out, _ = _run(capsys, "--list-checks", "--json")
    assert rc == 0
    rows = json.loads(out)["checks"]
    assert [r["check"] for r in rows] == list(CATALOGUE) + list(INTERNODE), \
        "listed in the order checks run, the multi-node checks last"
    for row in rows:
        spec = {**CATALOGUE, **INTERNODE}[row["check"]]
        doc = (spec.fn.__doc__ or "").strip()
        assert doc, f"{row['check']}: {spec.fn.__name__} has no docstring"
        flat = " ".join(doc.split())
        assert row["summary"] and flat.startswith(row["summary"]), row
        assert row["scope"] in ("gpu", "node", "internode")
        assert Severity(row["severity"]) and Action(row["action"])
        # The name the style guide asks for: ecc.volatile_uncorrected -> check_ecc_volatile_uncorrected
        assert spec.fn.__name__ == "check_" + row["check"].replace(".", "_"), spec.fn.__name__


def test_every_summary_is_a_whole_sentence_in_json_and_text(capsys) -> None:
    """The summary is the docstring's first sentence, however many lines it wraps over: it
    ends with a full stop, and no clause is cut (pcie.replay once read "... above")."""
    rc, out, _ = _run(capsys, "--list-checks", "--json")
    rows = json.loads(out)["checks"]
    cut = [(r["check"], r["summary"]) for r in rows
           if not r["summary"].endswith(".") or r["summary"].count("(") != r["summary"].count(")")
           or r["summary"].count("`") % 2 or r["summary"].split()[-1].rstrip(".") in
           ("the", "a", "an", "is", "of", "to", "above", "below", "that", "after", "GPU's")]
    assert not cut, cut
    assert next(r["summary"] for r in rows if r["check"] == "slurm.job_gpus").endswith(
        "so we cannot tell which GPUs to probe.")
    rc, out, _ = _run(capsys, "--list-checks")
    for row in rows:
        line = next(ln for ln in out.splitlines() if ln.startswith(row["check"] + " "))
        assert line.endswith("  " + row["summary"]), line


def test_list_checks_table_has_one_line_per_check(capsys) -> None:
    rc, out, _ = _run(capsys, "--list-checks")
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["CHECK", "SCOPE", "SEVERITY", "ACTION"]
    listed = [ln.split()[0] for ln in lines[1:1 + len(CATALOGUE)]]
    assert listed == list(CATALOGUE)
    row = next(ln for ln in lines if ln.startswith("retired_pages.count "))
    assert row.split()[1:5] == ["gpu", "fail", "rma", "thresholds.retired_pages"]
    assert "Retired pages in total" in row


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    path.chmod(0o644)
    return path


def _running_as_root() -> bool:
    """--check-config judges ownership as root would: tmp_path files are root's only then."""
    return os.geteuid() == 0


def test_check_config_prints_each_value_and_where_it_came_from(tmp_path: Path, capsys,
                                                               monkeypatch) -> None:
    path = _config(tmp_path, 'state_dir = "/srv/hc"\n[thresholds]\nretired_pages = 12\n'
                             '[checks]\ndisabled = ["persistence_mode"]\n')
    monkeypatch.setenv("GPU_HEALTHCHECK_CONFIG", str(path))
    rc, out, err = _run(capsys, "--check-config")
    if not _running_as_root():
        assert rc == 3 and "owned by uid" in err
        return
    assert rc == 0, err
    assert out.splitlines()[0] == f"config file: {path} (environment GPU_HEALTHCHECK_CONFIG; valid)"
    rows = {ln.split()[0]: ln for ln in out.splitlines()[2:-1]}
    assert set(rows) == CONFIG_KEYS
    # the last line: the GPU models --level deep has a published floor for
    assert out.splitlines()[-1].startswith("--level deep floors (27 models; any other model is judged ")
    assert "NVIDIA B200, NVIDIA B300," in out.splitlines()[-1]
    assert rows["state_dir"].split()[1:] == ['"/srv/hc"', str(path)]
    assert rows["thresholds.retired_pages"].split()[1:] == ["12", str(path)]
    assert rows["checks.disabled"].split()[1:] == ['["persistence_mode"]', str(path)]
    assert rows["kernel_log"].split()[1:] == ['"/dev/kmsg"', "default"]
    assert rows["scontrol"].endswith("default") and "found on PATH" in rows["scontrol"]


def test_check_config_json(tmp_path: Path, capsys) -> None:
    path = _config(tmp_path, "[probe]\nquick_mib = 64\n")
    rc, out, _ = _run(capsys, "--check-config", "--json", "--config", str(path))
    doc = json.loads(out)
    assert doc["file"] == str(path) and doc["chosen_by"] == "--config" and doc["exists"]
    assert doc["values"]["probe.quick_mib"] == {"value": 64, "source": str(path)}
    assert doc["values"]["probe.timeout_s"] == {"value": 30.0, "source": "default"}
    assert {"NVIDIA B200", "NVIDIA H200 NVL", "Tesla V100-SXM2-32GB", "NVIDIA L40S"} <= set(doc["deep_floors"])
    if _running_as_root():
        assert rc == 0 and doc["valid"] and doc["errors"] == []


@pytest.mark.parametrize("text,key,problem", [
    ("state_dir = 3\n", "state_dir", "expected str"),
    ("[thresholds]\nretired_pagez = 1\n", "thresholds.retired_pagez", "unknown key"),
    ("[drain]\nmax_fraction = 2.0\n", "drain.max_fraction", "between 0 and 1"),
    ('[checks]\ndisabled = ["ecc.nope"]\n', "checks.disabled", "unknown check id"),
    ("state_dir = \n", None, "not valid TOML"),
])
def test_check_config_names_the_file_and_key_of_an_error(tmp_path: Path, capsys, text: str,
                                                         key: str, problem: str) -> None:
    path = _config(tmp_path, text)
    rc, out, err = _run(capsys, "--check-config", "--config", str(path))
    assert rc == 3
    assert "invalid" in out.splitlines()[0]
    prefix = f"gpu-healthcheck: config error: {path}: " + (f"{key}: " if key else "")
    assert any(ln.startswith(prefix) and problem in ln for ln in err.splitlines()), err


def test_check_config_missing_named_file(tmp_path: Path, capsys) -> None:
    rc, _, err = _run(capsys, "--check-config", "--config", str(tmp_path / "nope.toml"))
    assert rc == 3 and f"{tmp_path / 'nope.toml'}: no such file" in err


def test_check_config_refuses_what_root_would_refuse(tmp_path: Path, capsys) -> None:
    path = _config(tmp_path, 'state_dir = "/srv/hc"\n')
    path.chmod(0o666)
    rc, _, err = _run(capsys, "--check-config", "--config", str(path))
    assert rc == 3
    assert f"{path}: " in err and ("world-writable" in err or "owned by uid" in err)
    assert "refuses this file" in err


def test_a_missing_gres_conf_warning_says_how_to_fix_it(tmp_path: Path) -> None:
    """A fresh install on a config-less node has no /etc/slurm/gres.conf: the warning names the
    key to set and where slurmd keeps its copy."""
    from healthcheck.config import parse_config
    from healthcheck.report.admin import path_warnings

    config = parse_config(f'gres_conf = "{tmp_path / "gres.conf"}"\n', str(tmp_path / "c.toml"))
    warning = next(w for w in path_warnings(config, {}) if w.startswith("gres_conf:"))
    assert f"{tmp_path / 'gres.conf'} does not exist" in warning
    assert "set the config key gres_conf" in warning and "conf-cache/gres.conf" in warning
