"""The machine a run is on and how rnmt adapts to it: the RNMT_* switches, which implementation of a
computation runs (measured fast paths, CPU product routes), the hardware facts a run records, and the
allocator's tuning."""
