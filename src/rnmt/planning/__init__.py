"""From a validated config and the experiment and systems files to the jobs the Snakefile runs: the plan,
the papers' systems, the experiment files' checks, the layers a row's settings come from, and a built
run's config record."""
