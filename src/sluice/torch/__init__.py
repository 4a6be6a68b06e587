"""sluice for PyTorch: iterators over pipelines, and a proxy that lets a torch DataLoader use a GPU pipeline.

Example::

    from sluice.torch import DALIGenericIterator, LastBatchPolicy

    loader = DALIGenericIterator(pipe, ["images", "labels"], reader_name="Reader",
                                 last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True)
    for batch in loader:
        images, labels = batch[0]["images"], batch[0]["labels"]
"""

from sluice.torch import proxy
from sluice.torch.iterator import DALIClassificationIterator, DALIGenericIterator, LastBatchPolicy
from sluice.torch.proxy import DALIServer

# Short names.
Iterator = DALIGenericIterator
ClassificationIterator = DALIClassificationIterator

__all__ = ["DALIGenericIterator", "DALIClassificationIterator", "Iterator", "ClassificationIterator",
           "LastBatchPolicy", "DALIServer", "proxy"]
