"""The config schema (healthcheck/configschema.py) is the one definition of every key: each bound
belongs to its own dotted key, the records, the loader, --check-config's rows, docs/configuration.md
and the man page all follow it."""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List

import pytest
from hypothesis import given, settings, strategies as st

from healthcheck.checks import CATALOGUE
from healthcheck.config import (Config, ConfigError, _RECORDS, bound_text, check_value,
                                describe_schema, parse_config)
from healthcheck.configdoc import markdown_reference, toml_value, with_reference
from healthcheck.configschema import ALIASES, KEYS, SECTIONS, Key, section_of
from tests.lib.fakenode import ROOT

PATH = "/etc/gpu-healthcheck/config.toml"
TYPES = {"bool", "int", "float", "str", "path", "list", "choice", "ports", "nodes"}
# The annotation each schema type is read into (what mypy sees in the records).
ANNOTATIONS = {"bool": {"bool", "Optional[bool]"}, "int": {"int", "Optional[int]"},
               "float": {"float"}, "str": {"str", "Optional[str]"}, "path": {"str"},
               "list": {"Tuple[str, ...]"}, "choice": {"str"},
               "ports": {"Optional[Union[int, Tuple[str, ...]]]"}, "nodes": {"Union[int, float]"}}


def _refused(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        parse_config(text, PATH, CATALOGUE)
    return err.value


def _with(dotted: str, value: Any) -> str:
    section, _, leaf = dotted.rpartition(".")
    return (f"[{section}]\n" if section else "") + f"{leaf} = {_toml(value)}\n"


def _toml(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return toml_value(value)


def test_a_dcgm_diag_deadline_of_90_minutes_is_accepted_while_the_probes_keep_their_own_bound():
    """`[dcgm] timeout_s = 5400` (dcgmi diag -r 4 runs for hours) was refused by the bound of the
    CUDA probe's timeout_s: a bound keyed by the leaf name.  Each timeout_s has its own now."""
    assert parse_config("[dcgm]\nlevel = 4\ntimeout_s = 5400\n", PATH, CATALOGUE).dcgm.timeout_s == 5400.0
    for section in ("probe", "deep"):
        err = _refused(f"[{section}]\ntimeout_s = 5400\n")
        assert err.key == f"{section}.timeout_s"
        assert "must be between 0.1 and 3600" in err.problem and "5400" in err.problem
    err = _refused("[dcgm]\ntimeout_s = 20000\n")
    assert err.key == "dcgm.timeout_s" and "between 0.1 and 14400" in err.problem


def test_two_sections_enabled_keys_have_their_own_types():
    # [dcgm] enabled is auto|true|false, [probe] / [deep] / [repair] enabled are booleans
    assert parse_config('[dcgm]\nenabled = "auto"\n').dcgm.enabled == "auto"
    assert parse_config("[dcgm]\nenabled = false\n").dcgm.enabled == "false"
    assert parse_config("[probe]\nenabled = false\n").probe.enabled is False
    err = _refused('[probe]\nenabled = "auto"\n')
    assert err.key == "probe.enabled" and "expected bool" in err.problem
    err = _refused('[dcgm]\nenabled = "maybe"\n')
    assert err.key == "dcgm.enabled" and "auto, true, false" in err.problem
    assert _refused('[repair]\nenabled = "auto"\n').key == "repair.enabled"


def test_two_sections_floors_keys_have_their_own_shapes():
    deep = "NVIDIA H100 80GB HBM3:hbm_gbps=3350"
    fabric = "h100:busbw_gbps=360"
    assert parse_config(f'[deep]\nfloors = ["{deep}"]\n').deep.floors == (deep,)
    assert parse_config(f'[internode]\nfloors = ["{fabric}"]\n').internode.floors == (fabric,)
    assert _refused(f'[deep]\nfloors = ["{fabric}"]\n').key == "deep.floors"
    assert _refused(f'[internode]\nfloors = ["{deep}"]\n').key == "internode.floors"


def test_every_key_has_a_type_a_default_and_a_doc():
    assert len(KEYS) >= 96
    for dotted, key in KEYS.items():
        assert key.type in TYPES, dotted
        assert key.default is not None or key.unset, f"{dotted}: unset by default, but unset means what?"
        assert key.doc and key.doc.endswith("."), dotted
        assert len(re.findall(r"[.!?](\s|$)", key.doc)) <= 3, f"{dotted}: a doc is one or two sentences"
        assert section_of(dotted) in SECTIONS, dotted
        assert (key.type == "choice") <= bool(key.choices), dotted
        if key.low is not None and key.high is not None:
            assert key.low <= key.high, dotted
        assert key.high is None or key.low is not None, dotted


@pytest.mark.parametrize("dotted", sorted(KEYS))
def test_every_default_passes_its_own_validation(dotted: str):
    key = KEYS[dotted]
    if key.default is None:
        return
    assert parse_config(_with(dotted, key.default), PATH, CATALOGUE) == Config(source=PATH)
    value = list(key.default) if isinstance(key.default, tuple) else key.default
    assert check_value(PATH, dotted, key, value) == key.default


def test_the_records_are_the_schemas_sections():
    """Each record has exactly its section's keys, with the schema's default and a matching
    annotation; so no caller's attribute changes while the schema stays the one definition."""
    tables: Dict[str, Any] = {"": Config, **_RECORDS}
    assert set(tables) == set(SECTIONS)
    for section, record in tables.items():
        fields = [f for f in record._fields if f not in ("source", "warnings", "refused", "deprecated") and f not in _RECORDS]
        keys = [d.rpartition(".")[2] for d in KEYS if section_of(d) == section]
        assert fields == keys, section
        for name in fields:
            key = KEYS[f"{section}.{name}" if section else name]
            assert record._field_defaults[name] == key.default, (section, name)
            assert str(record.__annotations__[name]) in ANNOTATIONS[key.type], (section, name)
    assert [f for f in Config._fields[Config._fields.index("drain"):] if f not in ("source", "warnings", "refused", "deprecated")] \
        == [s for s in SECTIONS if s]


def test_check_configs_rows_are_the_schemas_keys_in_its_order():
    assert [row[0] for row in describe_schema()] == list(KEYS)


@pytest.mark.parametrize("text,key,known", [
    ("timeot_s = 5\n", "timeot_s", "act_budget_s, boot_grace_s, checks"),
    ("[dcgm]\ntimeot_s = 5\n", "dcgm.timeot_s", "(known: enabled, health_timeout_s, level, timeout_s)"),
    ("[probe]\nlevel = 2\n", "probe.level", "(known: enabled, full_fraction, quick_mib, timeout_s)"),
    ("[nosuch]\nx = 1\n", "nosuch", "unknown key (known: act_budget_s"),
])
def test_unknown_keys_are_reported_with_what_the_table_knows(text, key, known):
    err = _refused(text)
    assert err.key == key and "unknown key" in err.problem and known in err.problem
    assert str(err).startswith(f"{PATH}: {key}: ")


def test_every_error_is_found_in_one_pass_each_naming_file_key_value_and_bound():
    errors: List[ConfigError] = []
    config = parse_config("nvml_timeout_s = 0\nbogus = 1\n[dcgm]\ntimeout_s = 99999\nlevel = 4\n"
                          "[probe]\ntimeout_s = 3601\n[internode]\npartners = 0\n", PATH, CATALOGUE, errors)
    assert [e.key for e in errors] == ["nvml_timeout_s", "bogus", "dcgm.timeout_s", "probe.timeout_s",
                                       "internode.partners"]
    assert str(errors[2]) == (f"{PATH}: dcgm.timeout_s: must be between 0.1 and 14400 (seconds; 0 fails "
                              f"every diag; -r 4 runs for hours), got 99999.0")
    assert "between 0.1 and 3600" in str(errors[3]) and "3601" in str(errors[3])
    # a wrong key keeps its default; the right ones beside it are read
    assert config.dcgm.timeout_s == KEYS["dcgm.timeout_s"].default and config.dcgm.level == 4


BOUNDED = sorted(d for d, k in KEYS.items() if k.low is not None and k.type in ("int", "float"))


def _defaults_text() -> str:
    """A config file setting every key to its default, in the schema's sections."""
    lines: List[str] = []
    for section in SECTIONS:
        if section:
            lines.append(f"[{section}]")
        lines += [f"{d.rpartition('.')[2]} = {toml_value(k.default)}" for d, k in KEYS.items()
                  if section_of(d) == section and k.default is not None]
    return "\n".join(lines) + "\n"


def _set(text: str, dotted: str, value: Any) -> str:
    section, _, leaf = dotted.rpartition(".")
    header = f"[{section}]\n" if section else ""
    start = text.index(header) + len(header) if section else 0
    new = f"{leaf} = {_toml(value)}"
    if KEYS[dotted].default is None:  # unset by default: not in the file yet
        return text[:start] + new + "\n" + text[start:]
    found = re.compile(rf"^{leaf} = .*$", re.M).search(text, start)
    assert found, dotted
    return text[:found.start()] + new + text[found.end():]


@st.composite
def one_key(draw, inside: bool):
    dotted = draw(st.sampled_from(BOUNDED))
    key: Key = KEYS[dotted]
    low = key.low
    high = key.high if key.high is not None else max(low * 1e6, 1e9)
    if inside:
        if key.type == "int":
            return dotted, draw(st.integers(int(math.ceil(low)), int(high)))
        return dotted, draw(st.floats(low, high, allow_nan=False))
    below = low - 1 if key.type == "int" else -math.inf
    if key.high is not None and (low <= 0 or draw(st.booleans())):
        if key.type == "int":
            return dotted, draw(st.integers(int(key.high) + 1, int(key.high) * 4 + 10))
        return dotted, draw(st.floats(key.high, key.high * 4 + 10, exclude_min=True, allow_infinity=False))
    if key.type == "int":
        return dotted, draw(st.integers(int(below) - 1000, int(below)))
    return dotted, draw(st.floats(max(low - 1000, -1e9), low, exclude_max=True).filter(lambda v: v < low))


DEFAULTS_TEXT = _defaults_text()


def test_the_defaults_file_loads_to_the_default_config():
    assert parse_config(DEFAULTS_TEXT, PATH, CATALOGUE) == Config(source=PATH)


@settings(max_examples=300, deadline=None)
@given(one_key(inside=True))
def test_a_config_of_defaults_with_one_key_in_its_bounds_loads(case):
    dotted, value = case
    config = parse_config(_set(DEFAULTS_TEXT, dotted, value), PATH, CATALOGUE)
    read = config
    for part in dotted.split("."):
        read = getattr(read, part)
    assert read == value


@settings(max_examples=300, deadline=None)
@given(one_key(inside=False))
def test_a_config_of_defaults_with_one_key_out_of_its_bounds_is_refused_naming_the_key(case):
    dotted, value = case
    errors: List[ConfigError] = []
    parse_config(_set(DEFAULTS_TEXT, dotted, value), PATH, CATALOGUE, errors)
    assert [e.key for e in errors] == [dotted]
    assert str(errors[0]) == f"{PATH}: {dotted}: must be {bound_text(KEYS[dotted])}, got {value!r}"


def test_configuration_md_holds_the_schemas_key_reference():
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert page == with_reference(page), \
        "docs/configuration.md's key reference is out of date with the schema: run `make man`"
    for dotted in KEYS:
        assert f"| `{dotted}` |" in page, dotted


def test_the_man_page_lists_every_key_with_its_bounds():
    # tests/cli/test_manpage.py compares the whole page with the generator's
    page = (ROOT / "docs" / "gpu-healthcheck.8").read_text().replace("\\-", "-")
    files = page.split(".SH FILES", 1)[1].split(".SH ", 1)[0]
    for dotted, key in KEYS.items():
        assert f"\\fB{dotted}\\fR" in files, dotted
    assert "0.1 to 14400 seconds" in files
    assert len(re.findall(r"(?m)^\| `", markdown_reference())) == len(KEYS) + len(ALIASES)


def test_the_shipped_config_names_every_key_in_its_section():
    """deploy/slurm/config.toml: each key set or shown commented out, under its own [section]."""
    named = set()
    section = ""
    for line in (ROOT / "deploy" / "slurm" / "config.toml").read_text().splitlines():
        header = re.match(r"^\[(\w+)\]", line)
        if header:
            section = header.group(1)
        found = re.match(r"^#?\s*([a-z][a-z0-9_]*)\s*=", line)
        if found:
            named.add(f"{section}.{found.group(1)}" if section else found.group(1))
    assert set(KEYS) - named == set()
    assert named - set(KEYS) == set()


# A made-up rename, to test the mechanism apart from the real old names (ALIASES).
RENAMED = {"gang": "internode", "internode.gang_deadline_s": "internode.gang_timeout_s"}


def test_an_old_section_or_key_name_reads_as_the_name_it_has_now():
    config = parse_config("[gang]\npartners = 3\ngang_deadline_s = 60\n", PATH, CATALOGUE, aliases=RENAMED)
    assert config.internode.partners == 3 and config.internode.gang_timeout_s == 60.0
    assert parse_config("[internode]\ngang_deadline_s = 60\n", aliases=RENAMED).internode.gang_timeout_s == 60.0
    # an error names the key as the file spells it, with the bound of the key it reads as
    err = _refused_with("[gang]\ngang_deadline_s = 1\n")
    assert err.key == "gang.gang_deadline_s" and "between 5 and 3600" in err.problem
    err = _refused_with("[gang]\npartners = 3\n[internode]\npartners = 2\n")
    assert err.key == "internode" and err.problem.startswith("set twice, here and as gang ")
    from healthcheck.config import keys_set
    assert keys_set("[gang]\ngang_deadline_s = 60\n", aliases=RENAMED) == {"internode.gang_timeout_s"}
    assert "| `gang` | `internode` |" in markdown_reference(RENAMED)


def test_the_multi_node_keys_old_section_fabric_reads_as_internode_and_is_deprecated():
    """[fabric] was the multi-node checks' section; "fabric" now means NVSwitch only."""
    old = parse_config("[fabric]\npartners = 3\nfloors = [\"h100:busbw_gbps=360\"]\n"
                       "[suspects]\nfabric_retest = true\n", PATH, CATALOGUE)
    new = parse_config("[internode]\npartners = 3\nfloors = [\"h100:busbw_gbps=360\"]\n"
                       "[suspects]\ninternode_retest = true\n", PATH, CATALOGUE)
    assert old._replace(deprecated=()) == new and new.deprecated == ()
    assert old.internode.partners == 3 and old.suspects.internode_retest is True
    # one line per key, naming the file, the old name and the new
    assert old.deprecated == tuple(
        f"{PATH}: {was} is deprecated, read as {now}: rename it (docs/configuration.md#old-names)"
        for was, now in (("fabric.partners", "internode.partners"), ("fabric.floors", "internode.floors"),
                         ("suspects.fabric_retest", "suspects.internode_retest")))
    assert parse_config("[fabric]\n", PATH).deprecated == (
        f"{PATH}: [fabric] is deprecated, read as [internode]: rename it (docs/configuration.md#old-names)",)
    # an error under the old name names the key as the file spells it, with its bound
    assert _refused("[fabric]\npartners = 0\n").key == "fabric.partners"
    # the NVSwitch checks keep the word: no key of theirs moved
    assert not [k for k in KEYS if k.startswith("fabric.")] and ALIASES["fabric"] == "internode"


@pytest.mark.parametrize("text, key, other", [
    ("[fabric]\npartners = 3\n[internode]\npartners = 2\n", "internode", "fabric"),
    ("[internode]\ngang_bytes = 1024\n[fabric]\nsrun = \"/usr/bin/srun\"\n", "fabric", "internode"),
    ("[suspects]\nfabric_retest = true\ninternode_retest = false\n", "suspects.internode_retest",
     "suspects.fabric_retest"),
])
def test_the_old_name_and_the_new_together_are_an_error_naming_both(text, key, other):
    err = _refused(text)
    assert err.key == key and err.problem.startswith(f"set twice, here and as {other} ")
    assert f"{PATH}: {key}: set twice, here and as {other}" in str(err)
    errors: List[ConfigError] = []
    parse_config(text, PATH, CATALOGUE, errors)
    assert [e.key for e in errors] == [key]


def _refused_with(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        parse_config(text, PATH, CATALOGUE, aliases=RENAMED)
    return err.value
