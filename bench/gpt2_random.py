"""gpt2_random.py DIR VOCAB MERGES LAYERS HIDDEN HEADS POSITIONS SEED: a randomly initialised GPT-2 written as a
Hugging Face model directory with numpy alone (no torch, no transformers): config.json (GPT2LMHeadModel, vocabulary
50257, tied output layer, tanh GeLU), model.safetensors in float32 (weights drawn from N(0, 0.02), the residual
projections from N(0, 0.02 / sqrt(2 LAYERS)) as GPT-2 initialises them, LayerNorm weights 1, biases 0) and the
given vocab.json and merges.txt. mt-generate --load and transformers' from_pretrained both read it.
"""
import json
import shutil
import sys

import numpy as np

d, vocab, merges = sys.argv[1:4]
L, h, nh, P, seed = (int(a) for a in sys.argv[4:9])
V = 50257
rng = np.random.default_rng(seed)


def normal(shape, std=0.02):
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std))


tensors = {"transformer.wte.weight": normal((V, h)), "transformer.wpe.weight": normal((P, h))}
for i in range(L):
    p = "transformer.h.%d." % i
    tensors.update({
        p + "ln_1.weight": np.ones(h, np.float32), p + "ln_1.bias": np.zeros(h, np.float32),
        p + "attn.c_attn.weight": normal((h, 3 * h)), p + "attn.c_attn.bias": np.zeros(3 * h, np.float32),
        p + "attn.c_proj.weight": normal((h, h), 0.02 / (2 * L) ** 0.5), p + "attn.c_proj.bias": np.zeros(h, np.float32),
        p + "ln_2.weight": np.ones(h, np.float32), p + "ln_2.bias": np.zeros(h, np.float32),
        p + "mlp.c_fc.weight": normal((h, 4 * h)), p + "mlp.c_fc.bias": np.zeros(4 * h, np.float32),
        p + "mlp.c_proj.weight": normal((4 * h, h), 0.02 / (2 * L) ** 0.5), p + "mlp.c_proj.bias": np.zeros(h, np.float32),
    })
tensors["transformer.ln_f.weight"] = np.ones(h, np.float32)
tensors["transformer.ln_f.bias"] = np.zeros(h, np.float32)

# safetensors: an 8-byte little-endian header length, the JSON header (padded with spaces to 8 bytes), the data
header, off = {"__metadata__": {"format": "pt"}}, 0
for k, t in tensors.items():
    header[k] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + t.nbytes]}
    off += t.nbytes
hb = json.dumps(header, separators=(",", ":")).encode()
hb += b" " * (-len(hb) % 8)
with open(d + "/model.safetensors", "wb") as f:
    f.write(np.uint64(len(hb)).tobytes() + hb)
    for t in tensors.values():
        f.write(np.ascontiguousarray(t).tobytes())

config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_positions": P, "n_embd": h,
          "n_layer": L, "n_head": nh, "n_inner": None, "activation_function": "gelu_new", "resid_pdrop": 0.0,
          "embd_pdrop": 0.0, "attn_pdrop": 0.0, "layer_norm_epsilon": 1e-5, "initializer_range": 0.02,
          "scale_attn_weights": True, "use_cache": True, "bos_token_id": 50256, "eos_token_id": 50256,
          "tie_word_embeddings": True, "torch_dtype": "float32"}
with open(d + "/config.json", "w") as f:
    json.dump(config, f, indent=2)
shutil.copy(vocab, d + "/vocab.json")
shutil.copy(merges, d + "/merges.txt")
