"""Part (b) of benchmarks/gpu/run.sh: the model suite's transformers GPT-2 and Llama, nanoGPT and
the ResNet-style CNN (tests/test_models.py builds them: small configs, random weights) on the
device with the cuda executor: the eval forward, then one training step (loss, every gradient,
BatchNorm's running statistics) against eager on the same device, both measured against the
model in float64.
Dry run: the CPU (linalg kernels), nanoGPT only."""
import copy

from common import Results, close, executors, parse

import torch

import thunder


def _models():
    import test_models as tm

    torch.manual_seed(0)
    ids = tm._ids()
    labels = ids.clone()
    labels[0, :2] = -100
    idx = torch.randint(0, 64, (2, 16))
    targets = torch.roll(idx, -1, 1)
    targets[:, -1] = -1
    return {
        "nanogpt": (lambda: tm.NanoGPT(), dict(idx=idx, targets=targets)),
        "gpt2 (transformers)": (lambda: tm._language_model("gpt2"), dict(input_ids=ids, labels=labels)),
        "llama (transformers)": (lambda: tm._language_model("llama"), dict(input_ids=ids, labels=labels)),
        "resnet-style cnn": (lambda: tm.ResNet(), dict(x=torch.randn(4, 3, 16, 16), target=torch.tensor([0, 3, 9, 3]))),
    }


def check(a, build, kwargs):
    """tests/test_models.py's check_model on the device; thunder's results and eager's both
    measured against the model in float64 (common.close)."""
    import test_models as tm

    model = build().to(a.device)
    kwargs = {k: v.to(a.device) for k, v in kwargs.items()}
    reference = copy.deepcopy(model)
    wide = copy.deepcopy(model).double()
    wide_kwargs = {k: v.double() if v.is_floating_point() else v for k, v in kwargs.items()}
    jitted = thunder.jit(model, executors=executors(a))
    for m in (model, reference, wide):
        m.eval()
    with torch.no_grad():
        outs = [tm._outputs(f(**kw)) for f, kw in ((jitted, kwargs), (reference, kwargs), (wide, wide_kwargs))]
        for x, y, z in zip(*outs, strict=True):
            close(x, y, torch.float32, z)
    for m in (model, reference, wide):
        m.train()
    loss, expected, loss64 = tm._loss(jitted(**kwargs)), tm._loss(reference(**kwargs)), tm._loss(wide(**wide_kwargs))
    close(loss, expected, torch.float32, loss64)
    for t in (loss, expected, loss64):
        t.backward()
    n = 0
    for (name, p), (_, q), (_, w) in zip(model.named_parameters(), reference.named_parameters(),
                                         wide.named_parameters(), strict=True):
        assert (p.grad is None) == (q.grad is None), name
        if q.grad is not None:
            try:
                close(p.grad, q.grad, torch.float32, w.grad)
            except AssertionError as e:
                raise AssertionError(f"grad of {name}: {e}") from None
            n += 1
    for (name, b), (_, c), (_, d) in zip(model.named_buffers(), reference.named_buffers(), wide.named_buffers(), strict=True):
        close(b, c, torch.float32, d)
    trace = str(thunder.last_traces(jitted)[-1])
    return dict(grads_checked=n, loss=loss.item(), fusion_calls=trace.count(" = fusion_"))


def main():
    a = parse(__doc__)
    res = Results("models", a)
    for name, (build, kwargs) in _models().items():
        if a.dry_run and name != "nanogpt":
            continue
        res.run(f"{name} forward + training step on {a.device}", lambda: check(a, build, kwargs))


if __name__ == "__main__":
    main()
