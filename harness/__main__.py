import sys

from harness.cli import main

__harness_hidden__ = True

sys.exit(main())
