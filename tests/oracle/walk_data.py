"""walk_data.py: the learnable dataset of the training tests: documents of 20 to 89 ids below 60 that
mostly (p = 0.9) step along one random permutation, each ended by the end-of-document id 60 (so
NullTokenizer --vocab-size 60). A model can learn it well below its unigram entropy.

    walk_docs(seed, ndocs) -> list of documents (lists of ids)
    python3 walk_data.py PREFIX SEED NDOCS    writes PREFIX.bin / PREFIX.idx
"""
import sys

import numpy as np


def walk_docs(seed, ndocs):
    rs = np.random.RandomState(seed)
    perm = rs.permutation(60)
    docs = []
    for _ in range(ndocs):
        n = rs.randint(20, 90)
        x = [rs.randint(60)]
        for _ in range(n - 1):
            x.append(perm[x[-1]] if rs.rand() < 0.9 else rs.randint(60))
        docs.append(x + [60])
    return docs


if __name__ == "__main__":
    from indexed_write import write_indexed
    write_indexed(sys.argv[1], walk_docs(int(sys.argv[2]), int(sys.argv[3])))
