"""The transformers Llama of the compile-time-against-depth benchmarks (compile_depth.py,
first_step_stages.py, depth_calls.py, outline_calls.py): random weights from a config of width
256 (or `width`: MLP 4x, heads of 64), `layers` layers, and a batch of 2 x 64 token ids."""
import torch
import transformers


def llama(layers, width=256):
    """(model, ids), seeded as every run of these benchmarks is."""
    torch.manual_seed(0)
    heads = max(4, width // 64)
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=width, intermediate_size=4 * width,
                                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                                      max_position_embeddings=128, attention_dropout=0.0)
    ids = torch.randint(0, 512, (2, 64), generator=torch.Generator().manual_seed(1))
    return transformers.LlamaForCausalLM(config), ids
