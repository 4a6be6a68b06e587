"""sluice for PyTorch: iterators over pipelines, and a proxy that lets a torch DataLoader use a GPU pipeline.

Example::

    from sluice.torch import DALIGenericIterator, LastBatchPolicy

    loader = DALIGenericIterator(pipe, ["images", "labels"], reader_name="Reader",
                                 last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True)
    for batch in loader:
        images, labels = batch[0]["images"], batch[0]["labels"]

Many GPUs and many nodes: start one process per GPU with torchrun (``torchrun --nproc_per_node=8 train.py``
on one node; ``torchrun --nnodes=N --node_rank=K --nproc_per_node=8 --rdzv_backend=c10d
--rdzv_endpoint=HOST:PORT train.py`` on each of N nodes) and call ``torch.distributed.init_process_group``
before building pipelines. Readers then default to ``shard_id`` = the *global* rank and ``num_shards`` = the
world size, and pipelines to ``device_id`` = ``LOCAL_RANK`` (the GPU on this node); explicit values win. With
``pad_last_batch=True`` on the reader and ``reader_name=`` on the iterator every rank gets the same number of
batches per epoch, and ``shuffle_after_epoch=True`` permutes the data identically on every rank, so the shards
of an epoch are disjoint and cover the data set (``LastBatchPolicy.PARTIAL`` drops the padding). The data
must be readable at the same paths on every node. tests/torch/ddp_train.py is a complete example.
"""

from sluice.torch import proxy
from sluice.torch.iterator import DALIClassificationIterator, DALIGenericIterator, LastBatchPolicy
from sluice.torch.proxy import DALIServer

# Short names.
Iterator = DALIGenericIterator
ClassificationIterator = DALIClassificationIterator

__all__ = ["DALIGenericIterator", "DALIClassificationIterator", "Iterator", "ClassificationIterator",
           "LastBatchPolicy", "DALIServer", "proxy"]
