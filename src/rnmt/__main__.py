"""`python -m rnmt` is the `rnmt` command (what the Snakemake rules run)."""

import sys

from rnmt.cli import main

sys.exit(main())
