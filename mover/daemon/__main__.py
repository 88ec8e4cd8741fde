"""`python -m mover.daemon` is moverd."""

import sys

from mover.daemon.main import main

sys.exit(main())
