"""Registries that live only in test modules (``test_*.py``, ``*_test.py``, ``conftest.py``, the
files test runners collect): a stale entry there can fail or pass a test, not change what the scanned
library computes for its users. Such a registry is of low confidence; the same code in any
other module is judged as before."""

from __future__ import annotations

import os
from typing import Optional


def only_in_tests(hits: list) -> Optional[str]:
    """Why every use of the registry is test code, or None."""
    names = {os.path.basename(hit.module.path) for hit in hits}
    if not names or not all(name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py" for name in names):
        return None
    return f"every use is in a test module ({sorted(names)[0]}): a stale entry can change a test's outcome, not the library's results"
