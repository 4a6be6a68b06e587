"""The pipeline: graph tracing, batches, and the executor (DALI's ``nvidia.dali.pipeline``)."""

from sluice.pipeline.batch import Batch
from sluice.pipeline.graph import Constant, DataNode
from sluice.pipeline.if_rewrite import do_not_convert
from sluice.pipeline.pipeline import Pipeline, pipeline_def

__all__ = ["Batch", "Constant", "DataNode", "Pipeline", "do_not_convert", "pipeline_def"]
