"""Running on several GPUs and on clusters: GPU slot leases, multi-process launches."""
