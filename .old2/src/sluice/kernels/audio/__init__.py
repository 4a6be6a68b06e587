"""Audio kernels in torch, shared by the operators of :mod:`sluice.ops.audio`: spectral math and resampling."""
