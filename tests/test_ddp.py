"""DistributedDataParallel around a ThunderModule: gradients are all-reduced on every call,
and DDP's no_sync skips it (two processes, gloo on loopback)."""
import os

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

import thunder
from gloo import run_two_processes


def _worker(rank, port, queue):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
        ddp = nn.parallel.DistributedDataParallel(thunder.jit(m))
        synced = []
        for step in range(3):
            torch.manual_seed(100 + rank + 10 * step)  # different data on each rank
            m.zero_grad()
            ddp(torch.randn(3, 4)).sum().backward()
            g = m[0].weight.grad.clone()
            total = g.clone()
            dist.all_reduce(total)
            synced.append(torch.allclose(total / 2, g))
        m.zero_grad()
        with ddp.no_sync():
            torch.manual_seed(7 + rank)
            ddp(torch.randn(3, 4)).sum().backward()
        g = m[0].weight.grad.clone()
        total = g.clone()
        dist.all_reduce(total)
        queue.put((rank, synced, torch.allclose(total / 2, g)))
    finally:
        dist.destroy_process_group()


def test_ddp_of_thunder_module_syncs_gradients_every_call():
    results = run_two_processes(_worker, timeout=120)
    for rank, synced, synced_in_no_sync in results:
        assert synced == [True, True, True], f"rank {rank}: gradients not all-reduced on a cached call"
        assert not synced_in_no_sync, f"rank {rank}: no_sync still all-reduced"


def test_jit_of_ddp_refuses_with_a_workaround():
    class Fake(nn.parallel.DistributedDataParallel):
        def __init__(self):  # no process group needed to check the refusal
            nn.Module.__init__(self)

    with pytest.raises(NotImplementedError, match=r"DistributedDataParallel\(thunder.jit\(model\)\)"):
        thunder.jit(Fake())
