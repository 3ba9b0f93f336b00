"""llama_oracle.py: Hugging Face transformers' LlamaForCausalLM (and its mixtures of experts,
MixtralForCausalLM and Qwen2MoeForCausalLM) as the oracle for mt-ckpt-convert's Llama paths (run with the
Python of tests/oracle/venv-hf.sh).

  make DIR [--layers L] [--hidden H] [--heads NH] [--kv-heads G] [--ffn F] [--vocab V] [--positions P]
           [--dtype fp32|bf16|fp16] [--shard BYTES] [--tie] [--tokenizer [--corpus DOCS.jsonl]] [--seed S]
           [--set KEY=JSON ...] [--arch llama|mixtral|qwen2_moe [--experts E] [--topk K] [--moe-ffn F]
           [--shared-ffn F] [--mlp-only-layers I,J] [--norm-topk-prob]]
      a LlamaForCausalLM (or a Mixtral / Qwen2-MoE model: E experts of F, top K; Qwen2-MoE's shared expert
      of --shared-ffn, the dense layers of --mlp-only-layers, its q/k/v biases) with random weights (norm
      weights random too, so that a row in the wrong place shows), rope_theta 500000, written with
      save_pretrained (safetensors, sharded above BYTES); with
      --tokenizer a byte-level BPE tokenizer.json of Llama 3's kind (its Split regex, then ByteLevel; <s>
      put first by a TemplateProcessing; <unk> <s> </s> as ids 0 1 2, the config's bos and eos), trained
      here on the texts of DOCS.jsonl (default: one sentence) to V - 8 ids, saved beside it; --set
      overrides a config.json key after saving (for the refusals)
  layout HF_DIR MT_RELEASE_DIR TP
      every tensor of the mt checkpoint's TP rank directories (mp_rank_00 ... fp32 safetensors) equals
      what Megatron's layout makes of the HF tensors, derived here with numpy from the spec (section 9)
      and Megatron's Llama loader: query_key_value rows per query group [its query heads; its key head;
      its value head], dense_h_to_4h [gate; up] with each tensor rank holding [its gate rows; its up
      rows], the vocabulary padded for TP with zero rows and split by rows, dense and dense_4h_to_h split
      by columns, norms replicated; and nothing else is there. Prints the count.
  logits A B
      loads both directories with AutoModelForCausalLM (fp32; no missing or unexpected keys) and checks
      their logits on random ids are equal; prints the largest logit
  score DIR DOCS.jsonl MT_IDS MT_LOGITS MT_SCORES
      the ids of each document by transformers' AutoTokenizer (what Megatron's HuggingFaceTokenizer calls)
      equal those of the tokenizers library for the same tokenizer.json and MT_IDS (mt-tokenize, a line of
      ids per document); then, scoring each document's tokens after its BOS (after </s> without one) in
      windows of max_position_embeddings predictions as mt-eval --score does, transformers' logits equal
      MT_LOGITS (mt-eval --score --logits) to 1e-5 of the largest logit and its summed log-probabilities
      the logprob of MT_SCORES to 1e-5 relative; prints the measured gaps
  generate DIR N < prompts.txt
      greedy model.generate(do_sample=False) of N new tokens for each prompt line: JSON lines with the
      prompt's ids, the new tokens (ending with eos where it stopped there) and their text decoded by the
      tokenizer (its ByteLevel decoder, without clean_up_tokenization_spaces)
  aux DIR IDS TRACE SEQ SEED METRICS
      the load-balancing loss of mt-train's first iteration (METRICS, its --metrics-file; one micro-batch of
      one sequence, dropout 0) against transformers' Mixtral router: the sample of TRACE (MT_TRACE_SAMPLES,
      iteration 1), taken in Megatron's sample order (tests/oracle/gpt_dataset_ref.py, the documents of IDS,
      SEQ tokens, --seed SEED) and fed to model(ids, output_router_logits=True) without an attention mask.
      mt's lm loss must equal transformers' cross entropy of it (the same tokens), and its
      load_balancing_loss, Megatron's E / (K N^2) sum_e count_e P_e of each MoE layer over the micro-batch's
      N tokens averaged over the layers (count_e: the tokens whose top K has e, P_e: their softmax scores
      of e summed), must equal, to 1e-5 relative: with one layer, transformers' own router_aux_loss / K
      (E / T^2 sum_e count_e P_e over T tokens: no 1 / K); with several, the mean over the layers of
      transformers' load_balancing_loss_func of each layer's router logits alone / K, while its
      router_aux_loss, which takes the layers' logits as one set of L x N tokens (cross terms between
      layers), must differ from K x mt by more than 1e-3 relative. Prints the gaps and the smallest gap
      between a token's K-th and (K+1)-th logit (a near tie there would make fp32 and torch route apart)
  set-eos DIR ID
      makes token ID the end of text: tokenizer_config.json's eos_token (its spelling), config.json's and
      generation_config.json's eos_token_id
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

LLAMA3 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def make(a):
    import transformers
    torch.manual_seed(a.seed)
    common = dict(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.ffn,
                  num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                  max_position_embeddings=a.positions, rope_theta=500000.0, rms_norm_eps=1e-5,
                  tie_word_embeddings=a.tie, bos_token_id=1, eos_token_id=2)
    if a.arch == "mixtral":
        cfg = transformers.MixtralConfig(num_local_experts=a.experts, num_experts_per_tok=a.topk, sliding_window=None,
                                         **dict(common, intermediate_size=a.moe_ffn))
        m = transformers.MixtralForCausalLM(cfg)
    elif a.arch == "qwen2_moe":
        only = [int(x) for x in a.mlp_only_layers.split(",")] if a.mlp_only_layers else []
        cfg = transformers.Qwen2MoeConfig(num_experts=a.experts, num_experts_per_tok=a.topk, moe_intermediate_size=a.moe_ffn,
                                          shared_expert_intermediate_size=a.shared_ffn, mlp_only_layers=only,
                                          norm_topk_prob=a.norm_topk_prob, use_sliding_window=False, **common)
        m = transformers.Qwen2MoeForCausalLM(cfg)
    else:
        m = transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_(torch.randn_like(p) * (0.3 if "norm" in n else 0.05) + (1.0 if "norm" in n else 0.0))
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[a.dtype]
    m = m.to(dt)
    kw = {"max_shard_size": a.shard} if a.shard else {}
    m.save_pretrained(a.dir, safe_serialization=True, **kw)
    if a.tokenizer:
        from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
        from transformers import PreTrainedTokenizerFast
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(pattern=Regex(LLAMA3), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        if a.corpus:
            text = [json.loads(l)["text"] for l in open(a.corpus, encoding="utf-8")]
        else:
            text = ["mt converts checkpoints to and from Hugging Face directories, tensor by tensor."] * 20
        tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=a.vocab - 8, special_tokens=["<unk>", "<s>", "</s>"],
                                                          show_progress=False,
                                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                           special_tokens=[("<s>", tok.token_to_id("<s>"))])
        assert [tok.token_to_id(t) for t in ("<unk>", "<s>", "</s>")] == [0, 1, 2]
        PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>").save_pretrained(a.dir)
    for kv in a.set or []:
        k, v = kv.split("=", 1)
        p = os.path.join(a.dir, "config.json")
        c = json.load(open(p))
        c[k] = json.loads(v)
        json.dump(c, open(p, "w"), indent=2)


def hf_tensors(d):
    from safetensors.torch import load_file
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    out = {}
    for f in files:
        out.update({k: v.float().numpy() for k, v in load_file(os.path.join(d, f)).items()})
    return out


def layout(hf_dir, mt_dir, tp):
    from safetensors.numpy import load_file
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    w = hf_tensors(hf_dir)
    L, h, nh = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"]
    ng, f, V = cfg["num_key_value_heads"], cfg["intermediate_size"], cfg["vocab_size"]
    hn, per = h // nh, nh // ng
    Vp = -(-V // tp) * tp   # --make-vocab-size-divisible-by 1, padded for the tensor size
    pre = "language_model."
    whole = {}   # Megatron name -> (whole tensor, split dim or None, rows in chunks)
    emb = np.zeros((Vp, h), np.float32)
    emb[:V] = w["model.embed_tokens.weight"]
    whole[pre + "embedding.word_embeddings.weight"] = (emb, 0)
    for i in range(L):
        p, q = "model.layers.%d." % i, pre + "encoder.layers.%d." % i
        wq = w[p + "self_attn.q_proj.weight"].reshape(ng, per * hn, h)
        wk = w[p + "self_attn.k_proj.weight"].reshape(ng, hn, h)
        wv = w[p + "self_attn.v_proj.weight"].reshape(ng, hn, h)
        whole[q + "self_attention.query_key_value.weight"] = (np.concatenate([wq, wk, wv], axis=1).reshape(-1, h), 0)
        whole[q + "self_attention.dense.weight"] = (w[p + "self_attn.o_proj.weight"], 1)
        whole[q + "mlp.dense_h_to_4h.weight"] = ((w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]), 0)
        whole[q + "mlp.dense_4h_to_h.weight"] = (w[p + "mlp.down_proj.weight"], 1)
        whole[q + "input_layernorm.weight"] = (w[p + "input_layernorm.weight"], None)
        whole[q + "post_attention_layernorm.weight"] = (w[p + "post_attention_layernorm.weight"], None)
    whole[pre + "encoder.final_layernorm.weight"] = (w["model.norm.weight"], None)
    if not cfg.get("tie_word_embeddings", False):
        out = np.zeros((Vp, h), np.float32)
        out[:V] = w["lm_head.weight"]
        whole[pre + "output_layer.weight"] = (out, 0)
    n = 0
    for r in range(tp):
        got = load_file(os.path.join(mt_dir, "mp_rank_%02d" % r, "model.safetensors"))
        assert set(got) == set(whole), "rank %d: names differ: %s" % (r, sorted(set(got) ^ set(whole)))
        for name, (t, dim) in whole.items():
            if isinstance(t, tuple):   # gate, up: this rank's rows of each, stacked
                k = t[0].shape[0] // tp
                want = np.concatenate([t[0][r * k:(r + 1) * k], t[1][r * k:(r + 1) * k]])
            elif dim is None:
                want = t
            else:
                k = t.shape[dim] // tp
                want = t[r * k:(r + 1) * k] if dim == 0 else t[:, r * k:(r + 1) * k]
            assert got[name].dtype == np.float32 and got[name].shape == want.shape, (r, name, got[name].shape, want.shape)
            assert np.array_equal(got[name], want), "rank %d: %s differs from Megatron's layout" % (r, name)
            n += 1
    print("%d tensors over %d ranks" % (n, tp))


def logits(a, b):
    from transformers import AutoModelForCausalLM
    ms = []
    for d in (a, b):
        m, info = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32, output_loading_info=True)
        bad = {k: v for k, v in info.items() if v}
        assert not bad, "%s: %s" % (d, bad)
        assert type(m).__name__ in ("LlamaForCausalLM", "MixtralForCausalLM", "Qwen2MoeForCausalLM"), type(m).__name__
        ms.append(m.eval())
    torch.manual_seed(3)
    ids = torch.randint(0, ms[0].config.vocab_size, (2, 24))
    with torch.no_grad():
        x, y = (m(ids).logits for m in ms)
    assert torch.equal(x, y), "logits differ by %g" % (x - y).abs().max().item()
    print("largest logit %.4f" % x.abs().max().item())


def load(d):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    m = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
    return m, AutoTokenizer.from_pretrained(d)


def score(d, docs, mt_ids, mt_logits, mt_scores):
    from tokenizers import Tokenizer
    model, tok = load(d)
    ref_tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    V, T = model.config.vocab_size, model.config.max_position_embeddings
    ours = np.fromfile(mt_logits, np.float32)
    assert ours.size % V == 0, "mt logits: %d floats, not rows of %d" % (ours.size, V)
    ours = ours.reshape(-1, V)
    want_ids = [[int(t) for t in l.split()] for l in open(mt_ids)]
    scores = [json.loads(l) for l in open(mt_scores)]
    texts = [json.loads(l)["text"] for l in open(docs, encoding="utf-8")]
    assert len(texts) == len(want_ids) == len(scores), (len(texts), len(want_ids), len(scores))
    rows, worst_lp, nbos = [], 0.0, 0
    for i, text in enumerate(texts):
        ids = tok(text)["input_ids"]
        lib = ref_tok.encode(text).ids
        assert ids == lib, "document %d: transformers %s, tokenizers %s" % (i, ids[:20], lib[:20])
        assert ids == want_ids[i], "document %d: transformers %s, mt-tokenize %s" % (i, ids[:20], want_ids[i][:20])
        if ids[:1] == [tok.bos_token_id]:   # Megatron's tokenize() puts the BOS first: the context of the first token
            inp, tgt = ids[:-1], ids[1:]
            nbos += 1
        else:
            inp, tgt = [tok.eos_token_id] + ids[:-1], ids
        lp = 0.0
        for c in range(0, len(tgt), T):   # each window of T predictions restarts its context
            with torch.no_grad():
                lg = model(torch.tensor([inp[c:c + T]])).logits[0].double()
            rows.append(lg.numpy())
            lp += torch.log_softmax(lg, -1)[torch.arange(lg.shape[0]), torch.tensor(tgt[c:c + T])].sum().item()
        assert scores[i]["tokens"] == len(tgt), "document %d: mt scored %d tokens, not %d" % (i, scores[i]["tokens"], len(tgt))
        worst_lp = max(worst_lp, abs(scores[i]["logprob"] - lp) / max(1.0, abs(lp)))
    hf = np.concatenate(rows)
    assert hf.shape == ours.shape, "logits: transformers %s, mt %s" % (hf.shape, ours.shape)
    scale = np.abs(hf).max()
    gap = np.abs(hf - ours).max() / scale
    print("%d documents (%d after a BOS), %d tokens: logits %.2g of the largest %.3g, logprob %.2g relative"
          % (len(texts), nbos, hf.shape[0], gap, scale, worst_lp))
    assert gap < 1e-5 and worst_lp < 1e-5, "beyond 1e-5"


def generate(d, n):
    model, tok = load(d)
    for line in sys.stdin:
        ids = tok(line.rstrip("\n"))["input_ids"]
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 do_sample=False, max_new_tokens=n, pad_token_id=tok.eos_token_id)
        new = out[0, len(ids):].tolist()
        # the tokens' bytes: the ByteLevel decoder without transformers' clean_up_tokenization_spaces
        text = tok.decode([t for t in new if t != tok.eos_token_id], clean_up_tokenization_spaces=False)
        print(json.dumps({"prompt_ids": ids, "tokens": new, "text": text}))


def aux(d, ids_path, trace, seq, seed, metrics):
    import gpt_dataset_ref as gd
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func
    model, _ = load(d)
    E, K = model.config.num_local_experts, model.config.num_experts_per_tok
    docs = [[int(t) for t in l.split()] for l in open(ids_path)]
    sizes = np.array([len(x) for x in docs], np.int32)
    tokens = np.concatenate([np.array(x, np.int64) for x in docs])
    ptr = np.concatenate(([0], np.cumsum(sizes.astype(np.int64))[:-1]))
    lines = [l.split() for l in open(trace)]
    assert len(lines) == 1 and lines[0][0] == "1" and lines[0][2] == "1", "trace: %s" % lines
    first = int(lines[0][1])
    _, doc, samp, shuf = gd.gpt(sizes, 0, len(sizes), 1, seq, 1, seed, True)
    s = gd.fetch(tokens, ptr, sizes, doc, samp, shuf, seq, 1, first)
    assert (s >= 0).all(), "sample %d runs past the data" % first
    row = [json.loads(l) for l in open(metrics)]
    row = [r for r in row if r.get("type") == "train" and r["iteration"] == 1]
    assert len(row) == 1, "metrics: %d rows of iteration 1" % len(row)
    mt_lm, mt_lb = row[0]["lm_loss"], row[0]["load_balancing_loss"]
    with torch.no_grad():
        out = model(torch.tensor(s[None, :-1]), output_router_logits=True)
    lm = torch.nn.functional.cross_entropy(out.logits[0].double(), torch.tensor(s[1:])).item()
    logits = out.router_logits   # one [N, E] per MoE layer
    L = len(logits)
    top = torch.sort(torch.cat(logits).double(), dim=-1, descending=True).values
    margin = (top[:, K - 1] - top[:, K]).min().item()
    hf = out.aux_loss.item()
    per_layer = [load_balancing_loss_func((g,), E, K).item() / K for g in logits]
    want = hf / K if L == 1 else sum(per_layer) / L
    lm_gap, lb_gap = abs(mt_lm - lm) / abs(lm), abs(mt_lb - want) / abs(want)
    msg = ("sample %d, %d tokens, %d MoE layer%s: lm loss %.2g relative; load_balancing_loss %.7g, "
           % (first, seq, L, "s" if L > 1 else "", lm_gap, mt_lb))
    if L == 1:
        msg += "transformers' router_aux_loss / K %.7g: %.2g relative" % (hf / K, lb_gap)
    else:
        msg += ("the layers' mean of transformers' load_balancing_loss_func / K %.7g: %.2g relative; "
                "router_aux_loss / K %.7g (layers as one set) differs by %.2g"
                % (want, lb_gap, hf / K, abs(hf / K - mt_lb) / mt_lb))
    print(msg + "; smallest top-%d margin %.2g" % (K, margin))
    assert lm_gap < 1e-5, "lm loss: mt %.9g, transformers %.9g" % (mt_lm, lm)
    assert margin > 1e-5, "a near tie in the routing: %.2g" % margin
    assert lb_gap < 1e-5, "load_balancing_loss: mt %.9g, transformers %.9g" % (mt_lb, want)
    if L > 1:
        assert abs(hf / K - mt_lb) > 1e-3 * mt_lb, "router_aux_loss / K equals the layers' mean"


def set_eos(d, i):
    from tokenizers import Tokenizer
    spelling = Tokenizer.from_file(os.path.join(d, "tokenizer.json")).id_to_token(i)
    for f, k, v in (("tokenizer_config.json", "eos_token", spelling), ("config.json", "eos_token_id", i),
                    ("generation_config.json", "eos_token_id", i)):
        p = os.path.join(d, f)
        c = json.load(open(p))
        c[k] = v
        json.dump(c, open(p, "w"), indent=2)
    print(spelling)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    for k, v in (("layers", 3), ("hidden", 64), ("heads", 4), ("kv-heads", 2), ("ffn", 96), ("vocab", 301), ("seed", 1)):
        m.add_argument("--" + k, type=int, default=v)
    m.add_argument("--positions", type=int, default=64)
    m.add_argument("--corpus")
    m.add_argument("--dtype", default="fp32")
    m.add_argument("--shard", type=int, default=0)
    m.add_argument("--tie", action="store_true")
    m.add_argument("--tokenizer", action="store_true")
    m.add_argument("--set", action="append")
    m.add_argument("--arch", default="llama", choices=("llama", "mixtral", "qwen2_moe"))
    for k, v in (("experts", 4), ("topk", 2), ("moe-ffn", 48), ("shared-ffn", 40)):
        m.add_argument("--" + k, type=int, default=v)
    m.add_argument("--mlp-only-layers", default="")
    m.add_argument("--norm-topk-prob", action="store_true")
    lo = sub.add_parser("layout")
    lo.add_argument("hf_dir")
    lo.add_argument("mt_dir")
    lo.add_argument("tp", type=int)
    lg = sub.add_parser("logits")
    lg.add_argument("a")
    lg.add_argument("b")
    sc = sub.add_parser("score")
    for k in ("dir", "docs", "mt_ids", "mt_logits", "mt_scores"):
        sc.add_argument(k)
    ge = sub.add_parser("generate")
    ge.add_argument("dir")
    ge.add_argument("n", type=int)
    ax = sub.add_parser("aux")
    for k in ("dir", "ids", "trace"):
        ax.add_argument(k)
    ax.add_argument("seq", type=int)
    ax.add_argument("seed", type=int)
    ax.add_argument("metrics")
    se = sub.add_parser("set-eos")
    se.add_argument("dir")
    se.add_argument("id", type=int)
    a = ap.parse_args()
    if a.cmd == "make":
        make(a)
    elif a.cmd == "layout":
        layout(a.hf_dir, a.mt_dir, a.tp)
    elif a.cmd == "score":
        score(a.dir, a.docs, a.mt_ids, a.mt_logits, a.mt_scores)
    elif a.cmd == "generate":
        generate(a.dir, a.n)
    elif a.cmd == "aux":
        aux(a.dir, a.ids, a.trace, a.seq, a.seed, a.metrics)
    elif a.cmd == "set-eos":
        set_eos(a.dir, a.id)
    else:
        logits(a.a, a.b)


if __name__ == "__main__":
    main()
