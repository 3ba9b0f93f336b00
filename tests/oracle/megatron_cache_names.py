"""megatron_cache_names.py: Megatron-Core's index cache descriptions and file names, written from the
semantics of megatron/core/datasets (megatron_dataset.py, blended_dataset.py,
blended_megatron_dataset_config.py, utils.normalize; v0.13 tokenizer identifiers), independently of mt.

The description is json.dumps(ordered dict, indent=4); its MD5 (hex) starts the file names
"<md5>-GPTDataset-<split>-{description.txt,document_index.npy,sample_index.npy,shuffle_index.npy}" and
"<md5>-BlendedDataset-<split>-{description.txt,dataset_index.npy,dataset_sample_index.npy}".
"""
import functools
import hashlib
import json
import re
from collections import OrderedDict

import numpy

SPLITS = ["train", "valid", "test"]


def normalize(weights):
    w = numpy.array(weights, dtype=numpy.float64)
    return (w / numpy.sum(w)).tolist()


def split_matrix(split):
    vec = list(map(float, re.findall(r"[.0-9]+", split)))
    vec = vec + [0.0 for _ in range(3 - len(vec))]
    vec = normalize(vec)
    ends = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *vec])
    matrix = []
    for lo, hi in zip(ends[:-1], ends[1:]):
        matrix.append(None if min(hi, hi) <= max(lo, lo) else (max(lo, lo), min(hi, hi)))
    return matrix


def tokenizer(vocab, merges):
    if vocab is None:
        return None
    t = OrderedDict()
    t["class"] = "_GPT2BPETokenizer"
    t["tokenizer_path"] = [vocab, merges]
    return t


def gpt_identifiers(path, num_samples, split_index, seed, seq_length, split, vocab=None, merges=None):
    u = OrderedDict()
    u["class"] = "GPTDataset"
    u["dataset_path"] = path
    u["num_samples"] = num_samples
    u["index_split"] = SPLITS[split_index]
    u["random_seed"] = seed
    u["sequence_length"] = seq_length
    u["split"] = split
    u["split_matrix"] = split_matrix(split)
    u["tokenizer"] = tokenizer(vocab, merges)
    return u


def describe(u):
    text = json.dumps(u, indent=4)
    return text, hashlib.md5(text.encode("utf-8")).hexdigest()


def gpt_files(u):
    text, md5 = describe(u)
    base = "%s-GPTDataset-%s-" % (md5, u["index_split"])
    return text, {k: base + k for k in ("description.txt", "document_index.npy", "sample_index.npy",
                                        "shuffle_index.npy")}


def blend_identifiers(datasets, split_index, weights, size, weighted=True):
    """datasets: the components' gpt_identifiers; weights as given on --data-path (weighted) or the
    component lengths (unweighted): the builder normalizes given weights, BlendedDataset once more."""
    w = normalize(weights) if weighted else list(weights)
    u = OrderedDict()
    u["class"] = "BlendedDataset"
    u["datasets"] = datasets
    u["split"] = SPLITS[split_index]
    u["weights"] = normalize(w)
    u["size"] = size
    return u


def blend_files(u):
    text, md5 = describe(u)
    base = "%s-BlendedDataset-%s-" % (md5, u["split"])
    return text, {k: base + k for k in ("description.txt", "dataset_index.npy", "dataset_sample_index.npy")}
