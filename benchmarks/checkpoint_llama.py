"""Saved bytes of a transformers Llama training step with and without gradient checkpointing
(`model.gradient_checkpointing_enable()`), under thunder.jit (compile_stats' last_saved_bytes:
what @forward hands @backward, parameters included) and in eager (saved_tensors_hooks: what
autograd saves outside checkpoint regions; a checkpoint keeps its region's inputs by itself).
Checks that the loss and the gradients equal eager's.

    .venv/bin/python benchmarks/checkpoint_llama.py [--layers 4] [--width 256] [--seq 128]
"""
import argparse
import copy
import os
import sys
import warnings

import torch
import transformers

sys.path.insert(0, os.path.dirname(__file__))
import thunder  # noqa: E402
from gpt_block import eager_saved_bytes  # noqa: E402


def llama(layers, width):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=512, max_position_embeddings=512, hidden_size=width,
                                      intermediate_size=4 * width, num_hidden_layers=layers,
                                      num_attention_heads=width // 64, num_key_value_heads=width // 64)
    return transformers.LlamaForCausalLM(config).train()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=2)
    a = parser.parse_args()
    ids = torch.randint(0, 512, (a.batch, a.seq), generator=torch.Generator().manual_seed(1))
    warnings.simplefilter("ignore")
    print(f"Llama {a.layers} layers, width {a.width}, batch {a.batch}, seq {a.seq}, float32")
    print("| gradient checkpointing | thunder saved MiB | of which parameters | eager saved MiB (hooks) |")
    for checkpointing in (False, True):
        model = llama(a.layers, a.width)
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        reference = copy.deepcopy(model)
        jitted = thunder.jit(model)
        loss = jitted(input_ids=ids, labels=ids).loss
        expected = reference(input_ids=ids, labels=ids).loss
        torch.testing.assert_close(loss, expected)
        loss.backward(), expected.backward()
        for p, q in zip(model.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
        saved = thunder.compile_stats(jitted).last_saved_bytes["saved_after"]
        params = sum(p.numel() * p.element_size() for p in model.parameters())
        eager = eager_saved_bytes(lambda: reference(input_ids=ids, labels=ids).loss, ())
        mib = 2 ** 20
        print(f"| {'on' if checkpointing else 'off'} | {saved / mib:.2f} | at most {params / mib:.2f} | "
              f"{eager / mib:.2f} |")


if __name__ == "__main__":
    main()
