"""Two processes over gloo on loopback (tests/test_ddp.py, tests/test_fsdp.py)."""
import socket

import torch.multiprocessing as mp


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_processes(worker, timeout=120):
    """worker(rank, port, queue) in two spawned processes; what each put on the queue, in the
    order they came."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=worker, args=(r, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=timeout) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return results
