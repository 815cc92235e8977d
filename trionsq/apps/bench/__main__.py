"""`python -m trionsq.apps.bench` runs `trionsq bench`."""

import sys

from trionsq.apps.bench import main

sys.exit(main(sys.argv[1:]))
