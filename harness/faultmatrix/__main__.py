from harness.errors import exit_from
from harness.faultmatrix.matrix import main

exit_from(main)
