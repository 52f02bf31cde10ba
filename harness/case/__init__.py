"""Cases: what to run (spec), the built-in catalogue, and the seeded data every rank can recompute."""

from harness.case.spec import CaseSpec
from harness.case.catalog import builtin_cases, select_cases

__all__ = ["CaseSpec", "builtin_cases", "select_cases"]
