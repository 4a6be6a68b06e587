"""sluice: GPU data loading and augmentation for PyTorch, with NVIDIA DALI's operator API.

Example::

    import sluice
    from sluice import fn, types

    @sluice.pipeline_def(batch_size=64, num_threads=4, device_id=0, seed=1)
    def train(root):
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="Reader")
        images = fn.decoders.image_random_crop(jpegs, device="mixed")
        images = fn.resize(images, resize_x=224, resize_y=224)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT16, output_layout="CHW",
                                          mirror=fn.random.coin_flip(),
                                          mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                          std=[0.229 * 255, 0.224 * 255, 0.225 * 255])
        return images, labels
"""

from sluice import types
from sluice._cache import cache_dir
from sluice.errors import ArgumentError, MissingDependencyError, PipelineBrokenError, PipelineError, SluiceError
from sluice.pipeline import Batch, Constant, DataNode, Pipeline, pipeline_def
from sluice.pipeline.graph import types_constant as _types_constant
from sluice import ops  # noqa: E402  (registers the operators)
from sluice import _classes  # noqa: E402, F401  (the class form of the operators: ops.Resize, ...)
from sluice import fn  # noqa: E402

types.Constant = _types_constant  # DALI's types.Constant: the graph layer makes it, the base module names it

__version__ = "0.1.0"

__all__ = ["pipeline_def", "Pipeline", "DataNode", "Batch", "Constant", "fn", "ops", "types", "cache_dir",
           "SluiceError", "ArgumentError", "MissingDependencyError", "PipelineError", "PipelineBrokenError",
           "__version__"]
