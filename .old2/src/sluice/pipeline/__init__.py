"""The pipeline: graph tracing, batches, and the executor (DALI's ``nvidia.dali.pipeline``)."""

from sluice.pipeline.batch import Batch
from sluice.pipeline.graph import Constant, DataNode
from sluice.pipeline.pipeline import Pipeline, pipeline_def

__all__ = ["Batch", "Constant", "DataNode", "Pipeline", "pipeline_def"]
