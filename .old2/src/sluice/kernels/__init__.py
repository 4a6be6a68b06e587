"""sluice kernels."""
