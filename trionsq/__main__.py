"""`python -m trionsq ...` is the `trionsq` command."""

from trionsq.cli import main

raise SystemExit(main())
