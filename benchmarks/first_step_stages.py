import sys, time, torch, transformers, thunder
torch.manual_seed(0)
layers = int(sys.argv[1])
config = transformers.LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=1024, num_hidden_layers=layers,
                                  num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128, attention_dropout=0.0)
model = transformers.LlamaForCausalLM(config)
ids = torch.randint(0, 512, (2, 64), generator=torch.Generator().manual_seed(1))
fn = thunder.jit(model)
t = time.perf_counter()
loss = fn(input_ids=ids, labels=ids, use_cache=False).loss
t1 = time.perf_counter() - t
loss.backward()
print("first call", round(t1,2), "step", round(time.perf_counter() - t,2))
st = thunder.compile_stats(fn)
print({k: round(v,2) for k,v in st.last_stage_times.items()} if isinstance(st.last_stage_times, dict) else st.last_stage_times)
