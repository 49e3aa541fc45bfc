"""Config loading: defaults, every wrong key and type named, ownership refused for root, fuzz."""

import os

import pytest
from hypothesis import given, settings, strategies as st

from healthcheck.checks import CATALOGUE
from healthcheck.config import Config, ConfigError, load_config, parse_config, unsafe_ownership
from tests.lib.fakenode import ROOT


def test_missing_default_file_gives_defaults(tmp_path, monkeypatch):
    config = load_config(None, {})
    assert config.state_dir == "/var/lib/gpu-healthcheck" or os.path.exists("/etc/gpu-healthcheck/config.toml")


def test_named_file_must_exist(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(str(tmp_path / "nope.toml"), {})
    assert "nope.toml" in str(err.value) and "no such file" in str(err.value)


def test_env_names_the_file(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('state_dir = "/x"\n[drain]\nmax_fraction = 0.5\n')
    os.chmod(path, 0o644)
    config = load_config(None, {"GPU_HEALTHCHECK_CONFIG": str(path)})
    assert config.state_dir == "/x" and config.drain.max_fraction == 0.5


@pytest.mark.parametrize("text,key", [
    ("stat_dir = '/x'", "stat_dir"),
    ("[drain]\nmax_fraction = 'a lot'", "drain.max_fraction"),
    ("[drain]\nmax_fraction = 1.5", "drain.max_fraction"),
    ("expected_gpus = -1", "expected_gpus"),
    ("expected_gpus = true", "expected_gpus"),
    ("[probe]\nquick_mib = 1.5", "probe.quick_mib"),
    ("[checks]\ndisabled = ['no.such.check']", "checks.disabled"),
    ("[checks]\ndisabled = 'xid'", "checks.disabled"),
    ("drain = 3", "drain"),
    ("[thresholds]\nretired_page = 3", "thresholds.retired_page"),
    ("[internode]\nfloors = 'h100:busbw_gbps=360'", "internode.floors"),
    ("[internode]\nfloors = ['h100=360']", "internode.floors"),
    ("[internode]\nfloors = ['h100:busbw=360']", "internode.floors"),
    ("[internode]\nfloors = ['h100:busbw_gbps=fast']", "internode.floors"),
    ("[internode]\nfloors = ['h100:busbw_gbps=0']", "internode.floors"),
    ("[internode]\nfloors = ['h100:busbw_gbps=nan']", "internode.floors"),
    ("[internode]\nfloors = ['gpu:h100:busbw_gbps=360']", "internode.floors"),
    ("[internode]\nfloors = ['h100:busbw_gbps=360', 'H100:busbw_gbps=300']", "internode.floors"),
    ("[internode]\nfloors = [360]", "internode.floors"),
])
def test_wrong_key_or_type_names_file_and_key(text, key):
    with pytest.raises(ConfigError) as err:
        parse_config(text, "/etc/gpu-healthcheck/config.toml", CATALOGUE)
    assert err.value.key == key
    assert str(err.value).startswith(f"/etc/gpu-healthcheck/config.toml: {key}: ")


def test_invalid_toml_names_the_file():
    with pytest.raises(ConfigError) as err:
        parse_config("state_dir = ", "/etc/c.toml")
    assert "/etc/c.toml" in str(err.value) and "TOML" in str(err.value)


def test_ints_are_accepted_for_floats():
    assert parse_config("[probe]\ntimeout_s = 5").probe.timeout_s == 5.0


def test_ownership_rules_for_root():
    class St:
        st_uid, st_gid, st_mode = 0, 0, 0o100644
    assert unsafe_ownership(St, True) is None
    St.st_mode = 0o100666
    assert unsafe_ownership(St, True) == "world-writable"
    St.st_mode, St.st_uid = 0o100644, 1000
    assert "owned by uid 1000" in unsafe_ownership(St, True)
    assert unsafe_ownership(St, False) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="ownership is enforced only for root")
def test_world_writable_file_is_refused_and_defaults_apply(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('state_dir = "/evil"\n')
    os.chmod(path, 0o666)
    config = load_config(str(path), {})
    assert config.state_dir == Config().state_dir
    assert "world-writable" in config.warnings[0] and str(path) in config.warnings[0]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_text_parses_or_raises_config_error(text):
    try:
        parse_config(text, "f.toml")
    except ConfigError as exc:
        assert str(exc).startswith("f.toml: ")


KEYS = st.sampled_from(["state_dir", "kernel_log", "expected_gpus", "nvml_timeout_s", "metrics_file",
                        "bogus", "history_max_bytes"])
VALUES = st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=False), st.text(max_size=10),
                   st.booleans(), st.lists(st.integers(), max_size=2))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(KEYS, VALUES, max_size=4))
def test_structured_fuzz_never_escapes_config_error(table):
    import json
    text = "\n".join(f"{k} = {json.dumps(v)}" for k, v in table.items())
    try:
        parse_config(text, "f.toml")
    except ConfigError as exc:
        assert exc.key is None or exc.key in table


def test_the_sample_config_in_deploy_is_valid_and_shows_the_defaults():
    path = ROOT / "deploy" / "slurm" / "config.toml"
    config = parse_config(path.read_text(), str(path))
    assert config._replace(source=None) == Config()


def test_every_config_key_is_documented_in_the_sample():
    from healthcheck.config import describe_schema
    text = (ROOT / "deploy" / "slurm" / "config.toml").read_text()
    for key, _, _ in describe_schema():
        assert key.rsplit(".", 1)[-1] in text, key


@pytest.mark.parametrize("text,key", [
    ("nvml_timeout_s = nan", "nvml_timeout_s"),
    ("nvml_timeout_s = inf", "nvml_timeout_s"),
    ("nvml_timeout_s = 0", "nvml_timeout_s"),
    ("scontrol_timeout_s = 0", "scontrol_timeout_s"),
    ("scontrol_timeout_s = 1e9", "scontrol_timeout_s"),
    ("[probe]\ntimeout_s = inf", "probe.timeout_s"),
    ("[probe]\ntimeout_s = 0", "probe.timeout_s"),
    ("[probe]\ntimeout_s = -inf", "probe.timeout_s"),
    ("[probe]\nquick_mib = 0", "probe.quick_mib"),
    ("[probe]\nquick_mib = 10000000", "probe.quick_mib"),
    ("[probe]\nfull_fraction = nan", "probe.full_fraction"),
    ("[probe]\nfull_fraction = 0", "probe.full_fraction"),
    ("[drain]\nmax_fraction = nan", "drain.max_fraction"),
    ("xid_window_s = inf", "xid_window_s"),
    ("boot_grace_s = nan", "boot_grace_s"),
])
def test_values_that_cannot_be_meant_are_refused_naming_file_and_key(text, key):
    """NaN, infinity, zero or absurd deadlines and probe sizes larger than any GPU: each would
    fail (or hang) every check of every node, so they never get past the loader."""
    with pytest.raises(ConfigError) as err:
        parse_config(text, "/etc/gpu-healthcheck/config.toml", CATALOGUE)
    assert err.value.key == key
    assert str(err.value).startswith(f"/etc/gpu-healthcheck/config.toml: {key}: ")


def test_sane_edge_values_are_accepted():
    config = parse_config("xid_window_s = 0\nboot_grace_s = 0\n[drain]\nmax_fraction = 0\n"
                          "[probe]\nquick_mib = 1\ntimeout_s = 0.5\n")
    assert config.probe.quick_mib == 1 and config.xid_window_s == 0


def test_the_shipped_config_lists_every_key_with_its_default():
    """deploy/slurm/config.toml documents every key; the values it gives are the defaults."""
    shipped = ROOT / "deploy" / "slurm" / "config.toml"
    config = parse_config(shipped.read_text(), str(shipped))
    assert config._replace(source=None) == Config()
    from healthcheck.config import describe_schema
    text = shipped.read_text()
    for key, _, _ in describe_schema():
        assert key.rsplit(".", 1)[-1] in text, key
