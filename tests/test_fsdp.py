"""FSDP2 (torch.distributed.fsdp.fully_shard) with thunder.jit: two processes over gloo on the
CPU. Each transformer block sharded and jitted (or the whole model), forward, gradients and an
Adam step against unsharded eager; parameters, gradients and optimizer state stay DTensors
sharded as FSDP2 shards them; a bfloat16 mixed-precision policy against eager FSDP2 with the
same policy; gradient accumulation without and with gradient sync; torch.compile(block,
backend="thunder") per sharded block."""
import copy
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import thunder
from gloo import run_two_processes

D = 16


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(2)])
        self.head = nn.Linear(D, 4)

    def forward(self, x, y):
        for b in self.blocks:
            x = b(x)
        return F.cross_entropy(self.head(x).flatten(0, 1), y.flatten())


def _batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(2, 6, D, generator=g), torch.randint(0, 4, (2, 6), generator=g)


def _compiled(block):
    block.compile(backend="thunder")  # torch.compile's pattern: Dynamo's graphs to thunder's backend
    return block


def _shard(model, per_block, jit, **policy):
    """jit: None (eager FSDP2), thunder.jit or _compiled, applied to each sharded block (or the
    sharded root when not per_block)."""
    from torch.distributed.fsdp import fully_shard

    if per_block:
        for i, b in enumerate(model.blocks):
            fully_shard(b, **policy)
            if jit:
                model.blocks[i] = jit(b)
    fully_shard(model, **policy)
    if jit and not per_block:
        model = jit(model)
    return model


def _close(a, b, tol):
    return torch.allclose(a, b, rtol=tol, atol=tol)


def _training_matches_unsharded_eager(rank, per_block, jit=thunder.jit, steps=2):
    """Adam steps: the loss and gradients against eager on both ranks' data; what is sharded."""
    from torch.distributed.tensor import DTensor

    torch.manual_seed(0)
    ref = Model()
    model = _shard(copy.deepcopy(ref), per_block, jit=jit)
    opt, ref_opt = torch.optim.Adam(model.parameters(), lr=1e-2), torch.optim.Adam(ref.parameters(), lr=1e-2)
    failures = []
    for step in range(steps):
        loss = model(*_batch(rank, step))
        loss.backward()
        ref_losses = [ref(*_batch(r, step)) for r in range(2)]
        (sum(ref_losses) / 2).backward()  # FSDP2 averages the ranks' gradients
        if not _close(loss, ref_losses[rank], 1e-5):
            failures.append(f"step {step}: loss {loss.item()} != {ref_losses[rank].item()}")
        for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
            if not (isinstance(p, DTensor) and isinstance(p.grad, DTensor)):
                failures.append(f"{name}: parameter or gradient is not a DTensor")
            elif p.to_local().shape[0] != (q.shape[0] + 1) // 2 or not _close(p.grad.full_tensor(), q.grad, 1e-5):
                failures.append(f"step {step}: {name}: gradient differs or is not sharded")
        opt.step(), ref_opt.step()
        opt.zero_grad(), ref_opt.zero_grad()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        state = opt.state[p]["exp_avg"]
        if not isinstance(state, DTensor) or state.to_local().shape != p.to_local().shape:
            failures.append(f"{name}: optimizer state is not sharded")
        if not _close(p.full_tensor(), q, 1e-5):
            failures.append(f"{name}: parameter after the steps differs")
    if jit is _compiled:
        from thunder import dynamo_backend

        if not dynamo_backend.graphs() or {g.status for g in dynamo_backend.graphs()} != {"thunder"}:
            failures.append(f"torch.compile: {dynamo_backend.graphs()}")
        return failures
    jitted = list(model.blocks) if per_block else [model]
    for m in jitted:  # thunder ran forward and backward, compiled once
        if thunder.cache_misses(m) != 1 or not thunder.last_backward_traces(m):
            failures.append(f"thunder: {thunder.compile_stats(m)}")
    return failures


def _mixed_precision_matches_eager_fsdp(rank):
    from torch.distributed.fsdp import MixedPrecisionPolicy

    policy = dict(mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    torch.manual_seed(0)
    base = Model()
    eager = _shard(copy.deepcopy(base), True, jit=None, **policy)
    model = _shard(copy.deepcopy(base), True, jit=thunder.jit, **policy)
    x, y = _batch(rank, 0)
    loss, expected = model(x, y), eager(x, y)
    loss.backward(), expected.backward()
    failures = [] if _close(loss, expected, 2e-2) else [f"bf16 loss {loss.item()} != {expected.item()}"]
    if thunder.last_traces(model.blocks[0])[0].args[0].dtype != torch.bfloat16:
        failures.append("the jitted block did not run in bfloat16")
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        if p.dtype != torch.float32 or p.grad.dtype != torch.float32:
            failures.append(f"{name}: sharded parameter or gradient is not float32")
        if not _close(p.grad.full_tensor(), q.grad.full_tensor(), 3e-2):
            failures.append(f"{name}: bf16 gradient differs from eager FSDP2's")
    return failures


def _accumulation_matches_eager(rank):
    torch.manual_seed(0)
    ref = Model()
    model = _shard(copy.deepcopy(ref), True, jit=thunder.jit)
    for micro in range(2):
        model.set_requires_gradient_sync(micro == 1)  # reduce-scatter on the last micro-batch only
        model(*_batch(rank, 10 + micro)).backward()
        sum(ref(*_batch(r, 10 + micro)) for r in range(2)).div(2).backward()
    return [f"{name}: accumulated gradient differs" for (name, p), q in zip(model.named_parameters(), ref.parameters())
            if not _close(p.grad.full_tensor(), q.grad, 1e-5)]


def _nested_refused():
    from torch.distributed.fsdp import fully_shard

    model = Model()
    for b in model.blocks:
        fully_shard(b)
    fully_shard(model)
    try:
        thunder.jit(model)
    except NotImplementedError as e:
        return [] if "jit each sharded block instead" in str(e) else [str(e)]
    return ["thunder.jit of a module holding FSDP2 modules was not refused"]


def _worker(rank, port, queue):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        results = {"per block": _training_matches_unsharded_eager(rank, True),
                   "whole model": _training_matches_unsharded_eager(rank, False),
                   "torch.compile per block": _training_matches_unsharded_eager(rank, True, _compiled, steps=1),
                   "mixed precision": _mixed_precision_matches_eager_fsdp(rank),
                   "accumulation": _accumulation_matches_eager(rank), "nested": _nested_refused()}
    except Exception:  # noqa: BLE001 - reported to the test process
        import traceback

        results = {"error": [traceback.format_exc()]}
    finally:
        dist.destroy_process_group()
    queue.put((rank, results))


def test_fsdp2_with_thunder_jit_matches_eager():
    results = run_two_processes(_worker, timeout=240)
    for rank, checks in results:
        assert checks == {"per block": [], "whole model": [], "torch.compile per block": [], "mixed precision": [],
                          "accumulation": [], "nested": []}, f"rank {rank}"
