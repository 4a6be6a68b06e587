"""``nvidia.dali.tfrecord`` on sluice: the feature declarations of ``fn.readers.tfrecord``.

Example::

    import nvidia.dali.tfrecord as tfrec    # after sluice.compat.install()
    features = {"image/encoded": tfrec.FixedLenFeature((), tfrec.string, "")}
"""

from sluice.tfrecord import FixedLenFeature, VarLenFeature, float32, int64, string

__all__ = ["FixedLenFeature", "VarLenFeature", "float32", "int64", "string"]
