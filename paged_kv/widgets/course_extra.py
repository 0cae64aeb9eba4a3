"""Importing `paged_kv.widgets` checks first that the `course` extra is installed.

The views need ipywidgets and the plots matplotlib; the library's core needs neither, so a
plain `pip install paged_kv` leaves them out, and without them this module raises
`MissingExtra` naming the extra instead of a bare ModuleNotFoundError from deep inside a view.
"""

from __future__ import annotations

import importlib.util

from paged_kv.errors import MissingExtra

COURSE_PACKAGES = ("ipywidgets", "matplotlib")


def missing_packages() -> list[str]:
    """The packages of the `course` extra that are not installed here."""
    return [name for name in COURSE_PACKAGES if importlib.util.find_spec(name) is None]


_missing = missing_packages()
if _missing:
    raise MissingExtra(
        f"paged_kv.widgets (the course's views and plots) needs {' and '.join(_missing)}: "
        "pip install 'paged_kv[course]'. The library (paged_kv.cache, .attention, .serving, "
        ".tiers, .study) runs without them."
    )
