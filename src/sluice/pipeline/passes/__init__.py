"""Graph rewrites run when a pipeline builds: :mod:`.fusion` (``[crop ->] resize -> crop_mirror_normalize`` on the
GPU as one node, and the audio decode moved onto the device)."""
