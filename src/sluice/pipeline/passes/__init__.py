"""Graph rewrites run when a pipeline builds, matched on schema metadata: :mod:`.fusion` (a chain of GPU operators
declaring ``FusionStage`` metadata as one node of its fused operator, and an operator declaring a ``DeviceForm``
moved onto the device instead of feeding ``.gpu()``)."""
