"""Models of realistic size: transformers Llama- and GPT-2-style causal LMs of ~50 M parameters,
built from configs with random weights (no downloads), eager vs thunder.jit vs torch.compile
(inductor, default mode) in one process, float32 or under `torch.autocast("cpu", torch.bfloat16)`:

- train: one training step without an optimizer: forward with `labels` (the model's
  cross-entropy loss), `loss.backward()`, grads reset to None; batch 2, sequence 256;
- prefill: the forward under torch.no_grad() (`use_cache=False`, logits of every position);
  batch 2, sequence 256;
- decode: per-token greedy decoding, batch 1, with a transformers StaticCache (in-place KV
  updates): an eager prefill of a 32-token prompt (not timed), then 32 single-token steps, each
  `model(input_ids=tok, past_key_values=cache, cache_position=pos)` and an argmax; the time is
  the whole loop over the number of steps. Under --bf16-autocast each layer's value cache is
  allocated in the values' dtype (transformers' StaticCache allocates both in the keys' dtype:
  float32 after the Llama's rotary embedding, where index_copy_ refuses the bfloat16 values and
  eager fails).

Each engine's result is checked against eager's before timing (loss and grads, logits, the
first decode step's logits and the greedy tokens in float32). Timing: the engines take turns,
each timed once a round, for --rounds rounds; the table shows each engine's median. Prints the
CPU (model name, family/model, ISA flags that decide the kernels: avx512f, avx512_bf16, amx).

    .venv/bin/python benchmarks/realistic.py [--models llama gpt2] [--workloads train prefill decode]
        [--bf16-autocast] [--threads N] [--rounds 5] [--no-compile] [--quick]

--quick: tiny models and sizes, one round: checks that the script runs (tests/test_benchmarks.py),
timings meaningless.
"""
import argparse
import copy
import math
import os
import platform
import statistics
import sys
import time
import warnings
from contextlib import contextmanager, nullcontext

import torch
import transformers

import thunder

ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")

# name -> (config class, model class, full-size config, --quick config)
MODELS = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM,
              dict(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=6,
                   num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=1024),
              dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)),
    "gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel,
             dict(vocab_size=50257, n_embd=512, n_layer=8, n_head=8, n_positions=1024,
                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
             dict(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
}
FULL = dict(batch=2, seq=256, prompt=32, new_tokens=32)
QUICK = dict(batch=2, seq=16, prompt=8, new_tokens=4)


def cpu_description():
    """'model name (family F, model M); flags: ...' from /proc/cpuinfo (Linux), else platform's."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        return platform.processor() or platform.machine()
    flags = set(fields.get("flags", "").split())
    isa = " ".join(f"{f}={'yes' if f in flags else 'no'}" for f in ISA_FLAGS)
    return (f"{fields.get('model name', '?')} (vendor {fields.get('vendor_id', '?')}, family "
            f"{fields.get('cpu family', '?')}, model {fields.get('model', '?')}, stepping "
            f"{fields.get('stepping', '?')}); {isa}; {os.cpu_count()} logical CPUs")


def make_model(name, quick):
    config_cls, model_cls, full, small = MODELS[name]
    torch.manual_seed(0)
    return model_cls(config_cls(**(small if quick else full), bos_token_id=0, eos_token_id=None))


def zero_grads(model):
    for p in model.parameters():
        p.grad = None


# --------------------------------------------------------------------------------------------
# Workloads: each returns (run, check): run(fn, own) does one timed unit of work with the engine fn
# (the model own, jitted or compiled) and returns what check(got, expected) compares.


def train_workload(model, sizes, vocab, autocast):
    ids = torch.randint(0, vocab, (sizes["batch"], sizes["seq"]), generator=torch.Generator().manual_seed(1))
    model.train()

    def run(fn, own=model):
        with autocast():
            loss = fn(input_ids=ids, labels=ids).loss
        loss.backward()
        grads = [p.grad for p in own.parameters()]
        zero_grads(own)
        return loss.detach(), grads
    return run


def prefill_workload(model, sizes, vocab, autocast):
    ids = torch.randint(0, vocab, (sizes["batch"], sizes["seq"]), generator=torch.Generator().manual_seed(2))
    model.eval()

    def run(fn, own=model):
        with torch.no_grad(), autocast():
            return fn(input_ids=ids, use_cache=False).logits
    return run


def decode_workload(model, sizes, vocab, autocast):
    prompt, new = sizes["prompt"], sizes["new_tokens"]
    ids = torch.randint(0, vocab, (1, prompt), generator=torch.Generator().manual_seed(3))
    model.eval()
    caches = {}  # one StaticCache per engine (torch.compile marks its tensors static)

    def run(fn, own=model):
        cache = caches.get(id(fn))
        if cache is None:
            cache = caches[id(fn)] = static_cache(model.config, prompt + new)
        cache.reset()
        with torch.no_grad(), autocast():
            out = own(input_ids=ids, past_key_values=cache, cache_position=torch.arange(prompt), use_cache=True)
            tok = out.logits[:, -1:].argmax(-1)
            start = clock()
            tokens, first_logits = [], None
            for i in range(new):
                out = fn(input_ids=tok, past_key_values=cache, cache_position=torch.tensor([prompt + i]),
                         use_cache=True)
                tok = out.logits[:, -1:].argmax(-1)
                tokens.append(tok)
                first_logits = out.logits if first_logits is None else first_logits
            elapsed = clock() - start
        return (first_logits, torch.cat(tokens, 1)), elapsed / new  # seconds per token
    return run


def static_cache(config, length):
    """A StaticCache whose layers allocate the value cache in the values' dtype (transformers
    allocates keys and values in the keys' dtype: under bf16 autocast a Llama's keys are float32
    after the rotary embedding, its values bfloat16, and index_copy_ refuses the mix)."""
    cache = transformers.StaticCache(config=config, max_cache_len=length)
    for layer in cache.layers:
        def init(key_states, value_states, layer=layer, init=layer.lazy_initialization):
            init(key_states, value_states)
            if layer.values.dtype != value_states.dtype:
                layer.values = torch.zeros_like(layer.values, dtype=value_states.dtype)
                torch._dynamo.mark_static_address(layer.values)
        layer.lazy_initialization = init
    return cache


WORKLOADS = {"train": train_workload, "prefill": prefill_workload, "decode": decode_workload}


def clock():
    """The timer of the timed calls: wall time, or with --cpu-time the process's CPU time (all
    its threads: on a machine others load, what the work cost rather than how long it waited)."""
    return time.process_time() if CPU_TIME else time.perf_counter()


CPU_TIME = False


def timed(run, fn, own):
    """(result, seconds): a decode run times its own loop (the eager prefill left out)."""
    start = clock()
    result = run(fn, own)
    elapsed = clock() - start
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], float):
        return result
    return result, elapsed


def check(model_name, workload, engine, got, expected, bf16):
    """Aborts the benchmark when an engine's result differs from eager's."""
    tol = dict(rtol=5e-2, atol=5e-2) if bf16 else dict(rtol=1e-3, atol=1e-3)
    if workload == "decode":
        (got_logits, got_tokens), (exp_logits, exp_tokens) = got, expected
        got, expected = got_logits, exp_logits
        if not bf16 and not torch.equal(got_tokens, exp_tokens):  # bf16 rounding may pick another token
            sys.exit(f"ABORT: {engine} decoded other tokens than eager on {model_name}: "
                     f"{got_tokens.tolist()} != {exp_tokens.tolist()}")
    try:
        torch.testing.assert_close(got, expected, **tol)
    except AssertionError as e:
        sys.exit(f"ABORT: {engine}'s result differs from eager's on {model_name} {workload}:\n{e}")


PACKED_OFF = "thunder, packed weights off"


@contextmanager
def packing_off():
    """THUNDER_PACKED_WEIGHTS=off while a program is compiled (thunder/ops/packed_linear.py)."""
    before = os.environ.get("THUNDER_PACKED_WEIGHTS")
    os.environ["THUNDER_PACKED_WEIGHTS"] = "off"
    try:
        yield
    finally:
        if before is None:
            del os.environ["THUNDER_PACKED_WEIGHTS"]
        else:
            os.environ["THUNDER_PACKED_WEIGHTS"] = before


def bench(model_name, workload, args):
    """{engine: (median seconds, first-call seconds)} for one model and workload."""
    sizes = QUICK if args.quick else FULL
    model = make_model(model_name, args.quick)
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.bf16_autocast else nullcontext
    run = WORKLOADS[workload](model, sizes, model.config.vocab_size, autocast)
    expected, _ = timed(run, model, model)
    # each engine runs its own copy of the model (the same weights): what one engine does to the
    # parameters (thunder's packed weights make their storage copy-on-write, inductor asks for
    # their data pointers, which moves such a storage) is not paid by another
    owns = {"eager": model, "thunder": copy.deepcopy(model)}
    engines = {"eager": model, "thunder": thunder.jit(owns["thunder"])}
    if args.packed_ab:
        owns[PACKED_OFF] = copy.deepcopy(model)
        engines[PACKED_OFF] = thunder.jit(owns[PACKED_OFF])
    if not args.no_compile:
        torch._dynamo.reset()
        owns["torch.compile"] = copy.deepcopy(model)
        engines["torch.compile"] = torch.compile(owns["torch.compile"])
    first = {"eager": 0.0}
    for engine, fn in engines.items():
        if engine != "eager":
            start = time.perf_counter()
            with packing_off() if engine == PACKED_OFF else nullcontext():  # (read when it compiles)
                got, _ = timed(run, fn, owns[engine])
            first[engine] = time.perf_counter() - start
            check(model_name, workload, engine, got, expected, args.bf16_autocast)
    thunder.wait_for_kernels()  # (those compiled in the background: the timed calls run them)
    for engine, fn in engines.items() if not args.quick else ():  # a warm-up call each (allocator, caches)
        timed(run, fn, owns[engine])
    times = {engine: [] for engine in engines}
    for _ in range(args.rounds):
        for engine, fn in engines.items():
            times[engine].append(timed(run, fn, owns[engine])[1])
    return {engine: (statistics.median(ts), first[engine]) for engine, ts in times.items()}


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def ab_cells(r, eager, compiled):
    """The --packed-ab columns: the packing-off program's median and ratios ('' without it)."""
    if PACKED_OFF not in r:
        return ""
    off = r[PACKED_OFF][0]
    return f" {off * 1e3:.2f} | {eager / off:.2f} | {compiled / off:.2f} |"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    ap.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    ap.add_argument("--bf16-autocast", action="store_true", help='every call under torch.autocast("cpu", bfloat16)')
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--rounds", type=int, default=5, help="timed calls of each engine (median)")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time the process's CPU seconds instead of wall seconds (a loaded machine)")
    ap.add_argument("--packed-ab", action="store_true",
                    help="also time a thunder.jit compiled with THUNDER_PACKED_WEIGHTS=off (last columns)")
    ap.add_argument("--quick", action="store_true", help="tiny models, one round: only checks the script runs")
    args = ap.parse_args(argv)
    global CPU_TIME
    CPU_TIME = args.cpu_time
    if args.quick:
        args.rounds = 1
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")  # transformers' deprecation notes
    transformers.logging.set_verbosity_error()
    sizes = QUICK if args.quick else FULL
    dtype = "bf16 autocast" if args.bf16_autocast else "float32"
    print(f"CPU: {cpu_description()}")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} threads, "
          f"{dtype}; train/prefill batch {sizes['batch']} x seq {sizes['seq']}; decode batch 1, prompt "
          f"{sizes['prompt']}, {sizes['new_tokens']} new tokens (StaticCache); median of {args.rounds} rounds"
          + ("; process CPU time" if args.cpu_time else "")
          + (" -- QUICK: timings meaningless" if args.quick else ""))
    for name in args.models:
        n = sum(p.numel() for p in make_model(name, args.quick).parameters())
        print(f"{name}: {n / 1e6:.1f} M parameters")
    print()
    ab_head, ab_rule = (" packing off ms | packing off x eager | packing off x inductor |", " ---: | ---: | ---: |") \
        if args.packed_ab else ("", "")
    print("| model | workload | eager ms | torch.compile ms | thunder ms | thunder x eager | thunder x inductor "
          "| thunder first call s | torch.compile first call s |" + ab_head)
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + ab_rule)
    ratios = {}
    for workload in args.workloads:
        for name in args.models:
            r = bench(name, workload, args)
            eager, ours = r["eager"][0], r["thunder"][0]
            compiled, compile_first = r.get("torch.compile", (float("nan"), float("nan")))
            ratios.setdefault(workload, []).append((eager / ours, compiled / ours))
            unit = " per token" if workload == "decode" else ""
            print(f"| {name} | {workload}{unit} | {eager * 1e3:.2f} | {compiled * 1e3:.2f} | {ours * 1e3:.2f} | "
                  f"{eager / ours:.2f} | {compiled / ours:.2f} | {r['thunder'][1]:.1f} | {compile_first:.1f} |"
                  + ab_cells(r, eager, compiled), flush=True)
    print()
    for workload, rs in ratios.items():
        vs_compile = "" if args.no_compile else f", {geomean([c for _, c in rs]):.2f}x torch.compile"
        print(f"geometric mean over models, {workload}: thunder {geomean([e for e, _ in rs]):.2f}x eager{vs_compile}")
    print("x eager / x inductor: the other's median time over thunder's (> 1: thunder faster)")
    return ratios


if __name__ == "__main__":
    main()
