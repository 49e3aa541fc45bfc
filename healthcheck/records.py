"""`NamedTuple` for our records: typing.NamedTuple's class syntax and result, made cheaply.

    from .records import NamedTuple

    class MigDevice(NamedTuple):
        index: int
        uuid: Optional[str] = None

The class is what typing.NamedTuple makes (collections.namedtuple, with the class body's
defaults, docstring, methods and properties), and mypy sees typing.NamedTuple itself.  What is
left out is typing's check of each annotation at class creation: with `from __future__ import
annotations` every annotation is a string, which typing compiles into a ForwardRef, field by
field.  For the ~40 records a prolog imports that was ~1.5 ms of every job start, spent on
objects nothing reads.  `__annotations__` keeps the strings as written (config.py reads them).
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any, Dict, Tuple

if TYPE_CHECKING:
    from typing import NamedTuple as NamedTuple
else:
    # What typing.NamedTupleMeta refuses in a class body, and what it does not copy over.
    _PROHIBITED = frozenset({"__new__", "__init__", "__slots__", "__getnewargs__", "_fields",
                             "_field_defaults", "_make", "_replace", "_asdict", "_source"})
    _SPECIAL = frozenset({"__module__", "__name__", "__annotations__"})

    class _RecordMeta(type):
        def __new__(mcs, typename: str, bases: Tuple[type, ...], ns: Dict[str, Any]) -> Any:
            if not bases:  # NamedTuple itself
                return super().__new__(mcs, typename, bases, ns)
            if bases != (NamedTuple,):
                raise TypeError(f"{typename}: a record can only derive from NamedTuple")
            types = dict(ns.get("__annotations__", {}))
            defaults = []
            for name in types:
                if name in ns:
                    defaults.append(ns[name])
                elif defaults:
                    raise TypeError(f"{typename}: non-default field {name!r} follows a "
                                    f"field with a default")
            record = collections.namedtuple(typename, list(types), defaults=defaults,
                                            module=ns.get("__module__"))
            record.__annotations__ = types
            record.__new__.__annotations__ = types
            for key, value in ns.items():
                if key in _PROHIBITED:
                    raise AttributeError(f"{typename}: cannot overwrite NamedTuple attribute {key}")
                if key not in _SPECIAL and key not in types:
                    setattr(record, key, value)
            return record

    class NamedTuple(metaclass=_RecordMeta):
        """Base of a record class; the class made is a collections.namedtuple."""
