"""Property tests of the nvidia-smi XML replay (tests/fakegpu/from_nvidia_smi.py) on mutated real
dumps: a scenario or a ValueError, never another exception, never an entity expanded; and the
regression the fuzzer found in it."""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.lib.fakenode import ROOT

DUMPS = sorted((ROOT / "tests" / "fixtures" / "nvidia-smi-xml").glob("*.xml"))
sys.path.insert(0, str(ROOT / "tests" / "fakegpu"))
import from_nvidia_smi  # noqa: E402


def _mutate(data, text):
    """A real dump with one realistic damage: cut, spliced, a value replaced, text inserted."""
    kind = data.draw(st.sampled_from(["cut", "splice", "value", "insert", "entity"]))
    i = data.draw(st.integers(0, len(text)))
    j = data.draw(st.integers(i, min(len(text), i + 2000)))
    if kind == "cut":
        return text[:i] + text[j:]
    if kind == "splice":
        return text[:j] + text[i:j] + text[j:]
    if kind == "value":  # some element's text becomes anything (huge numbers included)
        new = data.draw(st.text(max_size=30) | st.integers(0, 10 ** 400).map(str)
                        | st.sampled_from(["N/A", "-1", "1e999", "0x" + "f" * 40, "9" * 400 + " W"]))
        new = new.replace("&", "&amp;").replace("<", "&lt;")
        return re.sub(r">[^<>]+<", lambda m: ">" + new + "<", text, count=data.draw(st.integers(1, 50)))
    if kind == "entity":
        decl = data.draw(st.sampled_from([
            '<!DOCTYPE nvidia_smi_log [<!ENTITY a "aaaaaaaaaa">]>',
            '<!DOCTYPE nvidia_smi_log [<!ENTITY % p SYSTEM "file:///etc/passwd"> %p;]>',
            '<!DOCTYPE nvidia_smi_log [<!ENTITY x SYSTEM "file:///etc/hostname">]>',
            '<!DOCTYPE nvidia_smi_log [<!EnTiTy a "b">]>']))
        body = text.split("?>", 1)[-1].replace("<!DOCTYPE", "<!-- -->").replace(
            "<product_name>", "<product_name>&a;&x;", 1)
        return '<?xml version="1.0"?>\n' + decl + body
    return text[:i] + data.draw(st.text(max_size=40)) + text[i:]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_xml_replay_of_a_damaged_dump_is_a_scenario_or_a_value_error(data):
    text = DUMPS[data.draw(st.integers(0, len(DUMPS) - 1))].read_text()
    damaged = _mutate(data, text)
    for arg in (damaged, damaged.encode("utf-8", "surrogatepass")):
        try:
            out = from_nvidia_smi.convert(arg)
        except ValueError:  # ET.ParseError is a SyntaxError: listed apart from it below
            continue
        except ET.ParseError:
            continue
        assert re.search("<!entity", damaged, re.I) is None, "entity declaration was parsed"
        assert out.startswith("# fakegpu scenario") and len(out) < 4096 + 100 * len(damaged)


def test_xml_replay_refuses_every_entity_declaration_before_parsing(tmp_path):
    laughs = ('<?xml version="1.0"?><!DOCTYPE nvidia_smi_log [<!ENTITY a "' + "a" * 100 + '">'
              + "".join(f'<!ENTITY {chr(98 + i)} "' + f"&{chr(97 + i)};" * 10 + '">' for i in range(8))
              + ']><nvidia_smi_log><driver_version>&i;</driver_version></nvidia_smi_log>')
    for doc in (laughs, laughs.encode(), laughs.replace("ENTITY", "entity")):
        with pytest.raises(from_nvidia_smi.UnsafeXMLError):
            from_nvidia_smi.convert(doc)


@pytest.mark.parametrize("digits", [306, 400])
def test_regression_xml_power_draw_of_hundreds_of_digits_is_not_an_overflow(digits, capsys):
    """fuzz_xml_replay crash (corpus/xml_replay/regress-power-draw-*): a power draw of 306+
    digits made power * 1000 inf, and int(round(inf)) raised OverflowError past main()."""
    dump = ROOT / "tests" / "fuzz" / "corpus" / "xml_replay" / "regress-power-draw-inf.xml"
    text = dump.read_text().replace("9" * 400, "9" * digits)
    out = from_nvidia_smi.convert(text)
    assert "power_mw" not in out and "PowerUsage" in out
    assert from_nvidia_smi.main([str(dump)]) == 0
    assert "PowerUsage" in capsys.readouterr().out
