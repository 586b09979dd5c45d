"""Speed benchmarks (`rnmt bench cells|decoder|train|decode|data`): the papers' speed columns as ratios measured
side by side in one process, plus absolute throughput as a fraction of the machine's measured
matrix-multiply peak. One module per benchmark; `timing` holds the shared clock, peak and environment,
`table` prints and writes the results."""

BENCHMARKS = ("cells", "decoder", "train", "decode", "data")
