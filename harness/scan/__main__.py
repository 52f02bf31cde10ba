"""``python -m harness.scan PATH...`` runs the id-hazard scan (see :mod:`harness.scan.cli`)."""

import sys

from harness.scan.cli import main

if __name__ == "__main__":
    sys.exit(main())
