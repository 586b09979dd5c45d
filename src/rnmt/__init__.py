"""rnmt: four recurrent neural machine translation papers as one Snakemake pipeline."""

__version__ = "0.1.0"
