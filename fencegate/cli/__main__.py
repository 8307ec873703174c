"""`python -m fencegate.cli`: the `fencegate` command, as the cluster and the lab start gateways.

Only `main` of the imported package runs, so SIGTERM's handler and `termination_held` share one state
with the commands (a script run as `__main__` would be a second copy of it).
"""

import sys

from fencegate.cli import main

sys.exit(main())
