"""One rank of a torch.distributed job (torchrun, NCCL): each rank owns one GPU and one module
instance, computes its shard with an iree_dispatch kernel on torch tensors (DLPack, no copies),
and the shards are exchanged with NCCL's all_gather. Every rank checks the gathered result
against numpy on the full inputs.

    torchrun --nproc_per_node=2 tests/runtime/distributed/allgather_worker.py build/gpu-tests/samples.vmfb
"""

from __future__ import annotations

import os
import sys

import numpy as np
import torch
import torch.distributed as dist

from iree_dispatch import runtime

N = 1_000_003


def main(vmfb: str) -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    module = runtime.load(vmfb, f"cuda://{local}")
    rng = np.random.default_rng(1234)  # the same full inputs on every rank
    a, b = rng.uniform(0.5, 2.0, N).astype(np.float32), rng.uniform(-2.0, 2.0, N).astype(np.float32)
    bounds = np.linspace(0, N, world + 1).astype(int)
    lo, hi = bounds[rank], bounds[rank + 1]
    shard = torch.from_dlpack(module.simple_mul(torch.from_numpy(a[lo:hi]).cuda(), torch.from_numpy(b[lo:hi]).cuda()))
    size = int(bounds[1] - bounds[0])
    padded = torch.full((size + 1,), float("nan"), device="cuda")  # all_gather needs equal sizes
    padded[: hi - lo] = shard
    gathered = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded)
    full = torch.cat([g[: int(bounds[r + 1] - bounds[r])] for r, g in enumerate(gathered)]).cpu().numpy()
    bad = int(np.count_nonzero(full != a * b))
    print(f"rank {rank}/{world} on cuda:{local}: {bad} of {N} elements differ", flush=True)
    dist.destroy_process_group()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
