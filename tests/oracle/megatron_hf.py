#!/usr/bin/env python3
"""megatron_hf.py: transformers' own Megatron-LM converters (transformers/models/megatron_gpt2/) run on
checkpoints that mt writes and reads, and the checks around them, for tests/pipeline/megatron-write.sh.

  restricted DIR            every model_optim_rng.pt under DIR names only globals of mt's allowlist in
                            its pickle (anything else is an error) and torch.load reads it; prints the
                            files and tensors loaded
  same_optim DIR_A DIR_B    the optimizer state of each rank file of A equals B's (indices, groups, moments,
                            steps, fp32 main parameters, loss scaler; the distributed optimizer's param
                            groups and its distrib_optim.pt beside the file, keys and tensors)
  same_model DIR_A DIR_B    the model entries (model, or model0, model1, ...) of each rank file of A equal B's
                            (keys and their nesting, tensors and dtypes)
  convert1 FILE VOCAB MERGES
                            convert_megatron_gpt2_checkpoint.py FILE (writes config.json and
                            pytorch_model.bin beside FILE)
  reshape VOCAB MERGES ARGS...
                            checkpoint_reshaping_and_interoperability.py ARGS (--megatron-path: the shim
                            beside this file)
  random DIR                a random GPT2LMHeadModel saved as pytorch_model.bin (with config.json)
  logits DIR IDS MT_LOGITS  the logits of DIR's GPT2LMHeadModel for each line of token ids of IDS (the
                            previous token as input, end of document first, as mt-eval --score does)
                            against mt's float32 logits (the first vocabulary-size columns); fails
                            beyond 1e-5 of the largest logit
  run SCRIPT ARGS...        the Python file SCRIPT run as __main__ with ARGS as its arguments (a test's own
                            check, run here to share this process's imports)
  --jobs FILE               many of the above in this one process (torch and transformers imported once):
                            each non-empty line of FILE not starting with # is LOG COMMAND ARGS... (quoted as
                            for the shell); the jobs run in order, each on its own, its stdout and stderr
                            (file descriptors 1 and 2) written to LOG; a failing job does not stop the
                            others. One line per job on stdout: "ok LOG", or "failed LOG: WHY" (its exit
                            status or exception; the rest in LOG). Exit status 1 when any job failed, else 0

The converters fetch GPT-2's tokenizer from the Hugging Face hub by name; here AutoTokenizer.from_pretrained
builds it from the vocab.json and merges.txt given, so nothing is downloaded.
"""
import os, runpy, shlex, sys, traceback
import numpy as np
import torch

CONVERTERS = None


def converters():
    import transformers.models.megatron_gpt2 as m
    return os.path.dirname(m.__file__)


def offline_tokenizer(vocab, merges):
    import transformers
    from transformers import GPT2TokenizerFast
    transformers.AutoTokenizer.from_pretrained = staticmethod(lambda *a, **k: GPT2TokenizerFast(vocab, merges))


ALLOWED = {"collections OrderedDict", "torch._utils _rebuild_tensor_v2", "argparse Namespace",
           "torch FloatStorage", "torch BFloat16Storage", "torch HalfStorage",
           "torch float32", "torch bfloat16", "torch float16",
           # the RNG state: torch's generator states (uint8 tensors), numpy's state vector
           "torch ByteStorage", "numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype"}


def globals_of(path):
    """The globals data.pkl of a torch.save file names (torch.load would import each), by pickletools."""
    import pickletools, zipfile
    with zipfile.ZipFile(path) as z:
        pkl = [n for n in z.namelist() if n.endswith("/data.pkl")]
        if len(pkl) != 1:
            sys.exit("%s: %d data.pkl entries" % (path, len(pkl)))
        data = z.read(pkl[0])
    names = set()
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("GLOBAL", "INST"):
            names.add(arg)
        elif op.name in ("STACK_GLOBAL", "OBJ"):
            names.add("<%s>" % op.name)   # names the class from the stack: not what torch.save writes here
    return names


def restricted(argv):
    """Every file's pickle names only allowlisted globals; then torch.load reads it (torch 1.13's torch.load
    ignores a pickle_module that is given without weights_only, so the globals are checked beforehand)."""
    files = tensors = 0
    for root, _, names in sorted(os.walk(argv[0])):
        for n in names:
            if n != "model_optim_rng.pt":
                continue
            path = os.path.join(root, n)
            bad = globals_of(path) - ALLOWED
            if bad:
                sys.exit("%s: globals outside the allowlist: %s" % (path, sorted(bad)))
            sd = torch.load(path, map_location="cpu")
            def count(v):
                if isinstance(v, dict):
                    return sum(count(x) for x in v.values())
                return 1 if isinstance(v, torch.Tensor) else 0
            files += 1
            tensors += count(sd["model"])
    if not files:
        sys.exit("no model_optim_rng.pt under %s" % argv[0])
    print("%d files, %d model tensors" % (files, tensors))


def rank_files(a_dir, b_dir):
    """(name, path in A, path in B) of every model_optim_rng.pt under A, its namesake under B."""
    for root, _, names in sorted(os.walk(a_dir)):
        for f in names:
            if f == "model_optim_rng.pt":
                pa = os.path.join(root, f)
                yield os.path.relpath(pa, a_dir), pa, os.path.join(b_dir, os.path.relpath(pa, a_dir))


def same_optim(argv):
    """The 'optimizer' entries of two Megatron checkpoints of the same layout are the same state: per-parameter
    step, exp_avg and exp_avg_sq equal under the same indices, the same param groups (indices, wd_mult,
    weight_decay, betas, eps), the same fp32 main parameters and loss scaler."""
    n = ne = 0
    for name, pa, pb in rank_files(*argv):
        OA, OB = (torch.load(p, map_location="cpu")["optimizer"] for p in (pa, pb))
        def fail(what):
            sys.exit("%s: %s" % (name, what))
        # a ChainedOptimizer's list (the dense parameters', the experts'): entry by entry
        if isinstance(OA, list) != isinstance(OB, list) or isinstance(OA, list) and len(OA) != len(OB):
            fail("optimizer %s and %s" % (type(OA).__name__, type(OB).__name__))
        dist_seen = False
        for oa, ob in (zip(OA, OB) if isinstance(OA, list) else [(OA, OB)]):
            if set(oa) != set(ob):
                fail("keys %s and %s" % (sorted(oa), sorted(ob)))
            sa, sb = (o["optimizer"] if "optimizer" in o else o for o in (oa, ob))
            if "state" not in sa:   # DistributedOptimizer.state_dict(): no per-parameter state, distrib_optim.pt
                if "state" in sb:
                    fail("distributed optimizer state against a non-distributed one")
                if len(sa["param_groups"]) != len(sb["param_groups"]):
                    fail("param groups differ in number")
                for g, (x, y) in enumerate(zip(sa["param_groups"], sb["param_groups"])):
                    for k in ("wd_mult", "lr_mult", "is_expert_parallel", "weight_decay", "betas", "eps", "step"):
                        if x[k] != y[k] or type(x[k]) is not type(y[k]) or "params" in x or "params" in y:
                            fail("param group %d %s: %s and %s" % (g, k, x.get(k), y.get(k)))
                da, db = (torch.load(os.path.join(os.path.dirname(p), "distrib_optim.pt"), map_location="cpu") for p in (pa, pb))
                if dist_seen:
                    continue   # (the list's file, compared at its first entry)
                dist_seen = True
                def same(x, y, where):
                    if type(x) is not type(y):
                        fail("%s: %s and %s" % (where, type(x).__name__, type(y).__name__))
                    if isinstance(x, list):
                        if len(x) != len(y):
                            fail("%s: %d and %d entries" % (where, len(x), len(y)))
                        return sum(same(u, v, "%s[%d]" % (where, q)) for q, (u, v) in enumerate(zip(x, y)))
                    if isinstance(x, dict):
                        if list(x) != list(y):
                            fail("%s: keys %s and %s" % (where, list(x), list(y)))
                        for k in x:
                            same(x[k], y[k], "%s[%r]" % (where, k))
                    elif isinstance(x, torch.Tensor):
                        if x.dtype != y.dtype or not torch.equal(x, y):
                            fail("%s differs" % where)
                        return x.numel()
                    elif x != y:
                        fail("%s: %r and %r" % (where, x, y))
                    return 0
                def count(x):
                    return sum(count(v) for v in x.values()) if isinstance(x, dict) else sum(map(count, x)) \
                        if isinstance(x, list) else x.numel() if isinstance(x, torch.Tensor) else 0
                same(da, db, "distrib_optim.pt")
                ne += count(da)
                if "grad_scaler" in oa and {k: float(v) for k, v in oa["grad_scaler"].items()} != \
                        {k: float(v) for k, v in ob["grad_scaler"].items()}:
                    fail("grad_scaler differs")
                continue
            if sorted(sa["state"]) != sorted(sb["state"]):
                fail("parameter indices differ")
            for i, x in sa["state"].items():
                y = sb["state"][i]
                for k in ("exp_avg", "exp_avg_sq"):
                    if x[k].dtype != y[k].dtype or not torch.equal(x[k], y[k]):
                        fail("state %d %s differs" % (i, k))
                if float(x["step"]) != float(y["step"]):
                    fail("state %d step %s and %s" % (i, x["step"], y["step"]))
            for g, (x, y) in enumerate(zip(sa["param_groups"], sb["param_groups"])):
                for k in ("params", "wd_mult", "weight_decay", "betas", "eps"):
                    if x[k] != y[k]:
                        fail("param group %d %s: %s and %s" % (g, k, x[k], y[k]))
            if len(sa["param_groups"]) != len(sb["param_groups"]):
                fail("param groups differ in number")
            if "fp32_from_fp16_params" in oa:
                for g, (x, y) in enumerate(zip(oa["fp32_from_fp16_params"], ob["fp32_from_fp16_params"])):
                    if len(x) != len(y) or not all(torch.equal(u, v) for u, v in zip(x, y)):
                        fail("fp32_from_fp16_params[%d] differ" % g)
            if "grad_scaler" in oa and {k: float(v) for k, v in oa["grad_scaler"].items()} != \
                    {k: float(v) for k, v in ob["grad_scaler"].items()}:
                fail("grad_scaler differs")
            n += len(sa["state"])
    print("%d elements of distrib_optim.pt equal" % ne if ne else "%d parameters' state equal" % n)


def same_model(argv):
    """The model entries (model, or the chunks model0, model1, ...) of two Megatron checkpoints of the same
    layout hold the same keys, nested the same way, and equal tensors of the same dtype; _extra_state
    entries are compared by name only (None from mt, Transformer Engine's buffers from the oracle)."""
    n = 0
    for name, pa, pb in rank_files(*argv):
        flat = []
        for p in (pa, pb):
            sd = torch.load(p, map_location="cpu")
            out = {}
            def walk(d, pre):
                for k, v in d.items():
                    if isinstance(v, dict):
                        walk(v, pre + k + ".")
                    else:
                        out[pre + k] = v
            walk({k: v for k, v in sd.items() if k == "model" or k.startswith("model") and k[5:].isdigit()}, "")
            flat.append(out)
        a, b = flat
        if set(a) != set(b):
            sys.exit("%s: keys differ: %s" % (name, sorted(set(a) ^ set(b))[:6]))
        for k in a:
            if k.endswith("_extra_state"):
                continue
            if a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k]):
                sys.exit("%s: %s differs" % (name, k))
            n += 1
    print("%d model tensors equal" % n)


def convert1(argv):
    f, vocab, merges = argv
    offline_tokenizer(vocab, merges)
    sys.argv = ["convert_megatron_gpt2_checkpoint.py", f]
    runpy.run_path(os.path.join(converters(), "convert_megatron_gpt2_checkpoint.py"), run_name="__main__")


def reshape(argv):
    vocab, merges = argv[:2]
    offline_tokenizer(vocab, merges)
    shim = os.path.join(os.path.dirname(os.path.abspath(__file__)), "megatron_shim")
    sys.argv = ["checkpoint_reshaping_and_interoperability.py", "--megatron-path", shim] + argv[2:]
    runpy.run_path(os.path.join(converters(), "checkpoint_reshaping_and_interoperability.py"), run_name="__main__")


def random(argv):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(3)
    cfg = GPT2Config(vocab_size=50257, n_positions=64, n_embd=32, n_layer=2, n_head=4, n_inner=128,
                     activation_function="gelu_new")
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():   # every weight and bias away from its initial constant
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(argv[0], safe_serialization=False)


def logits(argv):
    from transformers import GPT2LMHeadModel
    d, ids_file, mt_logits = argv
    model = GPT2LMHeadModel.from_pretrained(d).eval()
    eos = 50256
    rows = []
    for l in open(ids_file):
        ids = [int(t) for t in l.split()]
        with torch.no_grad():
            rows.append(model(torch.tensor([[eos] + ids[:-1]])).logits[0].double().numpy())
    hf = np.concatenate(rows)
    n = hf.shape[0]
    ours = np.fromfile(mt_logits, np.float32)
    if ours.size % n:
        sys.exit("mt's logits: %d values for %d tokens" % (ours.size, n))
    V = ours.size // n
    ours = ours.reshape(n, V)
    if hf.shape[1] < V:
        sys.exit("transformers' model has %d vocabulary columns, mt %d" % (hf.shape[1], V))
    hf = hf[:, :V]
    scale = np.abs(hf).max()
    diff = np.abs(hf - ours).max() / scale
    print("%d tokens x %d; mt vs transformers %.2g of the largest logit %.3g" % (n, V, diff, scale))
    if not diff < 1e-5:
        sys.exit(1)


def run(argv):
    sys.argv = list(argv)
    runpy.run_path(argv[0], run_name="__main__")


COMMANDS = {"restricted": restricted, "same_optim": same_optim, "same_model": same_model, "convert1": convert1,
            "reshape": reshape, "random": random, "logits": logits, "run": run}


def jobs(path):
    """--jobs FILE: each line LOG COMMAND ARGS..., run in order with fds 1 and 2 on LOG; one status line each."""
    status = os.fdopen(os.dup(1), "w")
    failed = 0
    for line in open(path, encoding="utf-8"):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        argv = shlex.split(line)
        log = argv[0]
        why = None
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        argv0 = sys.argv
        try:
            if len(argv) < 2 or argv[1] not in COMMANDS:
                raise SystemExit("no such command: %s" % (argv[1:2] or ["(none)"])[0])
            COMMANDS[argv[1]](argv[2:])
        except SystemExit as e:   # sys.exit() as a single run would exit
            if e.code not in (0, None):
                if isinstance(e.code, str):
                    sys.stderr.write(e.code + "\n")
                why = e.code if isinstance(e.code, str) else "exit status %d" % int(e.code)
        except Exception as e:
            traceback.print_exc()
            why = "%s: %s" % (type(e).__name__, e)
        finally:
            sys.argv = argv0
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
        if why is None:
            status.write("ok %s\n" % log)
        else:
            failed += 1
            status.write("failed %s: %s\n" % (log, str(why).replace("\n", " ")))
        status.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--jobs":
        sys.exit(jobs(sys.argv[2]))
    COMMANDS[sys.argv[1]](sys.argv[2:])
