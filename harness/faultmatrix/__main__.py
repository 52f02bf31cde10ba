import sys

from harness.faultmatrix.matrix import main

sys.exit(main())
