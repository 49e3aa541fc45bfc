"""--check-config, --gres and the command line's refusals, through the real CLI in a child
process (tests/conftest.py's simulated node: fake GPUs, its own config, state and logs)."""

from __future__ import annotations

import json

import pytest


def test_check_config_reports_every_error_in_one_pass(node):
    node.write_config('nvml_timeout_s = "ten"\n[drain]\nmax_fractoin = 0.2\n[thresholds]\nretired_pages = -1\n')
    result = node.run("--check-config")
    assert result.rc == 3
    for key in ("nvml_timeout_s: expected float", "drain.max_fractoin: unknown key",
                "thresholds.retired_pages: must be >= 0"):
        assert key in result.stderr, result.stderr
    doc = node.run("--check-config", "--json").json
    assert len(doc["errors"]) == 3 and not doc["valid"]


@pytest.mark.parametrize("text", ['state_dir = "var/gpu-healthcheck"\n', "nvml_timeout_s = 0\n",
                                  "[checks]\ndisabled = [\"ecc.nope\"]\n", "state_dir = \n"])
def test_check_config_a_bad_config_exits_as_node_exits_on_it(node, text):
    node.write_config(text)
    checked, ran = node.run("--check-config"), node.run("--node")
    assert checked.rc == ran.rc == 3, (checked.stderr, ran.stderr)


def test_check_config_refuses_a_relative_state_dir_and_exits_as_node_does(node):
    node.write_config('state_dir = "var/gpu-healthcheck"\n')
    checked = node.run("--check-config")
    assert checked.rc == 3 and "state_dir: must be an absolute path" in checked.stderr
    ran = node.run("--node")
    assert ran.rc == checked.rc and "state_dir: must be an absolute path" in ran.stderr


@pytest.mark.parametrize("key", ["kernel_log", "sysfs_root", "gres_conf"])
def test_check_config_warns_about_a_missing_path_and_stays_valid(node, key):
    node.write_config(f'{key} = "{node.tmp / "absent"}"\n')
    result = node.run("--check-config")
    assert result.rc == 0, result.stderr
    assert f"config warning: {key}: {node.tmp / 'absent'} does not exist" in result.stderr
    assert result.stderr.count("config warning") == 1


def test_check_config_gres_prints_the_prologs_map(node):
    # GPU 3 taken out of gres.conf: gres index 3 is /dev/nvidia4, NVML GPU 4
    node.gres_conf.write_text("AutoDetect=off\nName=gpu File=/dev/nvidia[0-2,4-7]\n")
    result = node.run("--check-config", "--gres")
    assert result.rc == 0, result.stderr
    row = next(line.split() for line in result.stdout.splitlines() if line.split()[:1] == ["3"])
    assert row[:4] == ["3", "/dev/nvidia4", "4", "4"], result.stdout
    doc = node.run("--check-config", "--gres", "--json").json["gres"]
    assert [r["nvml_index"] for r in doc["rows"]] == [0, 1, 2, 4, 5, 6, 7]
    assert doc["rows"][3]["uuid"] and doc["rows"][3]["file"] == "/dev/nvidia4"


def test_check_config_gres_says_why_an_index_is_unknown(node):
    node.gres_conf.write_text("Include gres.d/*.conf\n")
    result = node.run("--check-config", "--gres")
    assert result.rc == 0
    assert "globs" in result.stdout and "every gres index is unknown" in result.stdout


def test_cli_unknown_option_says_it_is_unknown(node):
    result = node.run("--node", "--bogus")
    assert result.rc == 3 and "unknown option --bogus" in result.stderr


@pytest.mark.parametrize("argv", [("--history", "--act"), ("--cluster", "--act"), ("--list-checks", "--act"),
                                  ("--check-config", "--act"), ("--history", "--gpus", "0"),
                                  ("--list-checks", "--gpus", "1"), ("--node", "--gres")])
def test_cli_act_and_gpus_are_refused_where_they_mean_nothing(node, argv):
    result = node.run(*argv)
    assert result.rc == 3 and "means nothing with" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
