"""Triton kernels of beam search's own step on CUDA: imported only where they run (rnmt.decode.select), so
the decode package loads without triton."""
