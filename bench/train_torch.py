# train_torch.py: the PyTorch side of bench/train-cpu and bench/gpu: a plain GPT-2 in torch (pre-LayerNorm
# blocks, learned positions, tanh GeLU, tied embeddings, biases, causal attention written as matmul + mask +
# softmax since torch 1.13 has no scaled_dot_product_attention) trained with AdamW and gradient clipping
# on random tokens, dropout 0, in fp32 on the CPU with a fixed thread count, or with the forward pass
# under torch.autocast("cpu", dtype=torch.bfloat16) (bf16 matrix products through oneDNN, fp32
# weights, gradients and optimizer: PyTorch's CPU mixed precision) when PRECISION is bf16. With DEVICE cuda
# (bench/gpu's peers) the same model runs on the GPU under torch.autocast("cuda", bf16), with
# scaled_dot_product_attention (flash attention) where torch has it and the fused AdamW.
# MODE eager (the default) is PyTorch as a user would write it, without torch.compile; compile is the same
# model under torch.compile as PyTorch's regional compilation: each transformer block compiled (one graph,
# reused by every layer, so compiling does not grow with the depth) and the loss head (final LayerNorm,
# tied output layer, cross-entropy) compiled; compile-model is torch.compile of the whole model (one graph
# of all the layers: a longer compilation). The optimizer step stays eager in all three. Compilation
# happens in the warm-up steps. Without torch.compile (torch < 2) MODE compile exits 3 saying so.
# Prints one line:
#   params <n> loss <last loss> warmup_s <s> step_ms <ms> <ms> ... [peak_mb <MB>]
# with the wall time of the warm-up steps (the compilation under MODE compile), the time of each step
# after them (forward, backward, clipping, AdamW, zeroing), and on cuda the peak of torch's allocated GPU
# memory.
# Usage: train_torch.py LAYERS HIDDEN HEADS SEQ MAX_POSITIONS BATCH VOCAB_PADDED THREADS WARMUP STEPS
#        [fp32|bf16] [cpu|cuda] [eager|compile|compile-model]
import contextlib
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, nh):
        super().__init__()
        self.nh = nh
        self.ln1 = nn.LayerNorm(h, eps=1e-5)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h, eps=1e-5)
        self.fc = nn.Linear(h, 4 * h)
        self.fc2 = nn.Linear(4 * h, h)

    def forward(self, x, mask):
        B, T, C = x.shape
        hs = C // self.nh
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.nh, hs).transpose(1, 2)
        k = k.view(B, T, self.nh, hs).transpose(1, 2)
        v = v.view(B, T, self.nh, hs).transpose(1, 2)
        if q.is_cuda and hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(B, T, C)
            x = x + self.proj(y)
            return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(mask[:T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, h, nh, P, V):
        super().__init__()
        self.wte = nn.Embedding(V, h)
        self.wpe = nn.Embedding(P, h)
        self.blocks = nn.ModuleList([Block(h, nh) for _ in range(L)])
        self.lnf = nn.LayerNorm(h, eps=1e-5)
        self.register_buffer("mask", torch.triu(torch.ones(P, P, dtype=torch.bool), diagonal=1))
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x, self.mask)
        return self.head(x, targets)

    def head(self, x, targets):
        logits = self.lnf(x) @ self.wte.weight.t()   # tied output layer
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def main():
    L, h, nh, T, P, B, V, threads, warmup, steps = (int(a) for a in sys.argv[1:11])
    bf16 = len(sys.argv) > 11 and sys.argv[11] == "bf16"
    dev = sys.argv[12] if len(sys.argv) > 12 else "cpu"
    mode = sys.argv[13] if len(sys.argv) > 13 else "eager"
    if mode not in ("eager", "compile", "compile-model"):
        sys.exit("train_torch.py: unknown mode %s (eager, compile, compile-model)" % mode)
    if mode != "eager" and not hasattr(torch, "compile"):
        print("torch %s has no torch.compile" % torch.__version__, file=sys.stderr)
        sys.exit(3)
    amp = (lambda: torch.autocast(dev, dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
    torch.set_num_threads(threads)
    torch.manual_seed(1234)
    # built on the device where torch can (2.0 and later): initialising 1.5B parameters on the CPU is slow
    where = torch.device(dev) if hasattr(torch.device, "__enter__") else contextlib.nullcontext()
    with where:
        model = GPT(L, h, nh, P, V)
    model = model.to(dev)
    if mode == "compile":
        for i, b in enumerate(model.blocks):
            if hasattr(b, "compile"):
                b.compile()
            else:
                model.blocks[i] = torch.compile(b)
        model.head = torch.compile(model.head)
    elif mode == "compile-model":
        model = torch.compile(model)
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.999), eps=1e-8,
                            **({"fused": True} if dev == "cuda" else {"foreach": False}))
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, min(V, 50257), (warmup + steps, B, T + 1), generator=g).to(dev)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    times, warm_s = [], 0.0
    start = time.perf_counter()
    for i in range(warmup + steps):
        sync()
        t0 = time.perf_counter()
        if i == warmup:
            warm_s = t0 - start
        x, y = data[i, :, :-1], data[i, :, 1:]
        opt.zero_grad(set_to_none=False)
        with amp():
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    nparams = sum(p.numel() for p in model.parameters())
    peak = " peak_mb %.0f" % (torch.cuda.max_memory_allocated() / 2**20) if dev == "cuda" else ""
    graphs = ""
    if mode != "eager":   # graphs compiled: one per region; one per layer would show here
        from torch._dynamo.utils import counters
        graphs = " graphs %d" % counters["stats"]["unique_graphs"]
    print("params %d loss %.4f warmup_s %.1f%s step_ms %s%s" % (nparams, loss.item(), warm_s, graphs,
                                                                " ".join("%.1f" % t for t in times), peak))

if __name__ == "__main__":
    main()
