"""Triton kernels of the models' own computations on CUDA (the cells' are rnmt.cells.triton): imported only
where they run (rnmt.models.decoder_sequence), so the models package loads without triton."""
