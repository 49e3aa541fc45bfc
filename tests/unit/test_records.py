"""healthcheck.records.NamedTuple makes the class typing.NamedTuple makes, without typing's
per-field annotation checks (a prolog-speed measure): the same class body must give the same
behaviour, and the same mistakes must fail the same way."""

from __future__ import annotations

import typing
from typing import Optional, Tuple

import pytest

from healthcheck import records
from healthcheck.config import Config, ConfigError, parse_config
from healthcheck.model import GpuSnapshot, ProbeResult, ProbeStatus


def _pair(body: str) -> Tuple[type, type]:
    """The same class body under records.NamedTuple and typing.NamedTuple."""
    made = []
    for base in (records.NamedTuple, typing.NamedTuple):
        ns: dict = {"NamedTuple": base, "Optional": Optional, "Tuple": Tuple}
        exec("from __future__ import annotations\n" + body, ns)  # noqa: S102 - test fixture
        made.append(ns["Rec"])
    return made[0], made[1]


BODY = '''
class Rec(NamedTuple):
    """A record."""

    index: int
    uuid: Optional[str] = None
    links: Tuple[int, ...] = ()
    LIMIT = 7

    @property
    def label(self) -> str:
        return f"gpu{self.index}"

    def twice(self) -> int:
        return 2 * self.index

    @classmethod
    def zero(cls) -> "Rec":
        return cls(0)
'''


def test_same_class_body_same_behaviour() -> None:
    ours, typings = _pair(BODY)
    for cls in (ours, typings):
        rec = cls(3, links=(1, 2))
        assert rec == (3, None, (1, 2)) and isinstance(rec, tuple)
        assert rec._replace(uuid="GPU-1").uuid == "GPU-1" and rec.uuid is None
        assert rec.label == "gpu3" and rec.twice() == 6 and cls.zero() == (0, None, ())
        assert cls.LIMIT == 7 and cls.__doc__ == "A record."
        assert rec._asdict() == {"index": 3, "uuid": None, "links": (1, 2)}
        with pytest.raises(AttributeError):
            rec.index = 4  # type: ignore[misc]
    assert ours._fields == typings._fields
    assert ours._field_defaults == typings._field_defaults
    assert ours.__name__ == typings.__name__ and ours.__qualname__ == typings.__qualname__
    assert repr(ours(1)) == repr(typings(1))
    # annotations are kept as written (config.py reads them), not compiled into ForwardRefs
    assert ours.__annotations__ == {"index": "int", "uuid": "Optional[str]",
                                    "links": "Tuple[int, ...]"}


@pytest.mark.parametrize("body,error", [
    ("class Rec(NamedTuple):\n    a: int = 1\n    b: int\n", TypeError),
    ("class Rec(NamedTuple):\n    a: int\n    def _replace(self): pass\n", AttributeError),
    ("class Rec(NamedTuple):\n    a: int\n    __slots__ = ()\n", AttributeError),
])
def test_same_mistakes_fail_the_same_way(body: str, error: type) -> None:
    for base in (records.NamedTuple, typing.NamedTuple):
        with pytest.raises(error):
            exec("from __future__ import annotations\n" + body,  # noqa: S102 - test fixture
                 {"NamedTuple": base})


def test_the_records_in_use_are_plain_namedtuples() -> None:
    probe = ProbeResult(2, ProbeStatus.OK)
    assert probe.cu_result is None and probe._replace(bytes_tested=5).bytes_tested == 5
    gpu = GpuSnapshot(index=1)
    assert gpu.lost is None and GpuSnapshot._fields[0] == "index"
    # the config's type checks read the annotations: a wrong type is still refused by key
    with pytest.raises(ConfigError, match="nvml_timeout_s"):
        parse_config('nvml_timeout_s = "ten"\n', "/etc/gpu-healthcheck/config.toml")
    assert isinstance(Config(), tuple)
