# tfevents.py: the scalars of a TensorBoard event file, read with the standard library only (TFRecord
# framing with its masked CRC32C checked, the protobuf wire format decoded by hand): what train.sh and
# train-moe.sh compare with mt-train's log. tensorboard.sh has its own stricter decoder (field order,
# text tensors, file_version) as an independent check of the writer.
import glob
import os
import struct


def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 & -(c & 1))
    return c ^ 0xFFFFFFFF


def masked(c):
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def varint(b, i):
    r = s = 0
    while True:
        x = b[i]
        i += 1
        r |= (x & 0x7F) << s
        s += 7
        if x < 0x80:
            return r, i


def fields(b):
    """(field number, value) of a protobuf message; length-delimited values as bytes"""
    i, out = 0, []
    while i < len(b):
        k, i = varint(b, i)
        f, w = k >> 3, k & 7
        if w == 0:
            v, i = varint(b, i)
        elif w == 1:
            v = b[i:i + 8]; i += 8
        elif w == 5:
            v = b[i:i + 4]; i += 4
        elif w == 2:
            n, i = varint(b, i); v = b[i:i + n]; i += n
        else:
            raise ValueError("wire type %d" % w)
        out.append((f, v))
    return out


def scalars(logdir):
    """{tag: {step: float32 value}} of every events.out.tfevents.* file in logdir"""
    out = {}
    for path in sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*"))):
        data, i = open(path, "rb").read(), 0
        while i < len(data):
            n = struct.unpack("<Q", data[i:i + 8])[0]
            assert struct.unpack("<I", data[i + 8:i + 12])[0] == masked(crc32c(data[i:i + 8])), (path, i)
            rec = data[i + 12:i + 12 + n]
            assert struct.unpack("<I", data[i + 12 + n:i + 16 + n])[0] == masked(crc32c(rec)), (path, i)
            i += 16 + n
            step = 0
            for f, v in fields(rec):
                if f == 2:
                    step = v
                if f == 5:
                    for f2, v2 in fields(v):
                        if f2 != 1:
                            continue
                        tag = val = None
                        for f3, v3 in fields(v2):
                            if f3 == 1:
                                tag = v3.decode()
                            if f3 == 2:
                                val = struct.unpack("<f", v3)[0]
                        if tag is not None and val is not None:
                            out.setdefault(tag, {})[step] = val
    return out
