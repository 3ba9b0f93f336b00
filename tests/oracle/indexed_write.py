"""indexed_write.py: writes a Megatron MMIDIDX dataset (<prefix>.idx/.bin, uint16 tokens or, with
dtype="int32", int32 ones, one sequence per document) from lists of token ids, independently of mt's
writer; used by the pipeline tests."""
import numpy as np


def write_indexed(prefix, docs, dtype="uint16"):
    code, item = {"uint16": (8, 2), "int32": (4, 4)}[dtype]
    sizes = np.array([len(x) for x in docs], dtype=np.int32)
    ptr = np.zeros(len(sizes), dtype=np.int64)
    ptr[1:] = np.cumsum(sizes[:-1].astype(np.int64)) * item
    doc = np.arange(len(sizes) + 1, dtype=np.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + np.uint64(1).tobytes() + np.uint8(code).tobytes()
                + np.uint64(len(sizes)).tobytes() + np.uint64(len(doc)).tobytes())
        f.write(sizes.tobytes() + ptr.tobytes() + doc.tobytes())
    toks = np.concatenate([np.array(x, dtype=dtype) for x in docs])
    toks.tofile(prefix + ".bin")
    return toks
