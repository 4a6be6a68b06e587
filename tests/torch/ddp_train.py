"""Train a small DDP model on a sluice pipeline for a few epochs and check that every sample is seen exactly once
per epoch across the ranks, that every rank gets the same number of batches, and that shard and device
defaults follow torch.distributed (global rank for the shard, LOCAL_RANK for the GPU).

Run (one node, 2 GPUs)::

    torchrun --nproc_per_node=2 tests/torch/ddp_train.py --device cuda

On the CPU (gloo), as the CI does::

    torchrun --nproc_per_node=2 tests/torch/ddp_train.py --device cpu

Several nodes use the same script: ``torchrun --nnodes=2 --node_rank=<0|1> --nproc_per_node=<gpus>
--rdzv_backend=c10d --rdzv_endpoint=<host0>:29500 tests/torch/ddp_train.py --device cuda``; the data files must
then be on a path every node sees (``--root``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import torch
import torch.distributed as dist


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=23)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--root", default=None, help="folder for the data files (default: a private temp dir)")
    args = parser.parse_args()

    use_cuda = args.device == "cuda"
    local_rank = int(os.environ["LOCAL_RANK"])
    if use_cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    from sluice import fn, pipeline_def
    from sluice.torch import DALIGenericIterator, LastBatchPolicy

    root = args.root or tempfile.mkdtemp(prefix=f"sluice_ddp_{rank}_")
    os.makedirs(root, exist_ok=True)
    files = []
    for i in range(args.samples):
        path = os.path.join(root, f"{i:04d}.bin")
        if args.root is None or rank == 0:
            with open(path, "wb") as f:
                f.write(i.to_bytes(2, "little"))
        files.append(path)
    dist.barrier()

    # No shard_id / num_shards / device_id: they come from torch.distributed and LOCAL_RANK.
    @pipeline_def(batch_size=args.batch_size, num_threads=2, seed=1234,
                  **({} if use_cuda else {"device_id": None}))
    def pipe():
        data, label = fn.readers.file(files=files, shuffle_after_epoch=True, pad_last_batch=True, name="Reader")
        return (data.gpu() if use_cuda else data), label

    p = pipe()
    meta = p.reader_meta("Reader")
    assert (meta["shard_id"], meta["number_of_shards"]) == (rank, world), meta
    if use_cuda:
        assert p.device_id == local_rank, (p.device_id, local_rank)

    loader = DALIGenericIterator(p, ["data", "label"], reader_name="Reader",
                                 last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True)
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    model = torch.nn.Linear(1, 1).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)

    for epoch in range(args.epochs):
        seen: list[int] = []
        batches = 0
        for batch in loader:
            data = batch[0]["data"]
            assert data.device.type == device.type, data.device
            ids = (data[:, 0].long() + 256 * data[:, 1].long())
            x = ids.float().unsqueeze(1).to(device)
            loss = (ddp(x) - x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen.extend(ids.tolist())
            batches += 1
        all_seen: list = [None] * world
        all_batches: list = [None] * world
        dist.all_gather_object(all_seen, seen)
        dist.all_gather_object(all_batches, batches)
        if rank == 0:
            flat = sorted(i for s in all_seen for i in s)
            if flat != list(range(args.samples)):
                print(f"FAIL epoch {epoch}: samples seen {flat}", flush=True)
                return 1
            if len(set(all_batches)) != 1:
                print(f"FAIL epoch {epoch}: batches per rank {all_batches}", flush=True)
                return 1
            print(f"OK epoch {epoch}: {args.samples} samples once each, {all_batches[0]} batches per rank, "
                  f"loss {loss.item():.3f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
