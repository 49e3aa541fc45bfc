"""One test per check, named after the check.

A test about a check starts with the check's stem, its id with the dots as underscores
(`nvlink.down` -> `test_nvlink_down_...`), so that `pytest -k nvlink_down` collects every
layer's tests of that check.  per_check() makes one body, written once for every check, into
one such test per check.
"""

from __future__ import annotations

import inspect
from typing import Callable, Dict, Iterable


def stem(check_id: str) -> str:
    """The check's function stem: `ecc.volatile_uncorrected` -> `ecc_volatile_uncorrected`."""
    return check_id.replace(".", "_")


def per_check(suffix: str, check_ids: Iterable[str], body: Callable[..., None]) -> Dict[str, Callable[..., None]]:
    """{"test_<stem>_<suffix>": test} for each check id; each test calls body(check_id, ...) with
    the fixtures that body names after its first parameter.  A test module binds them with
    `globals().update(per_check(...))`, and pytest collects them under those names."""
    fixtures = list(inspect.signature(body).parameters.values())[1:]
    tests: Dict[str, Callable[..., None]] = {}
    for check_id in check_ids:
        name = f"test_{stem(check_id)}_{suffix}"

        def test(*args, _check_id: str = check_id, **kwargs) -> None:
            body(_check_id, *args, **kwargs)

        test.__name__ = test.__qualname__ = name
        test.__doc__ = body.__doc__
        test.__signature__ = inspect.Signature(fixtures)  # type: ignore[attr-defined]
        tests[name] = test
    return tests
