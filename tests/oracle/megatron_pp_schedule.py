"""megatron_pp_schedule.py: what one pipeline stage of Megatron-LM does in a training step, written from
the control flow of megatron/core/pipeline_parallel/schedules.py (forward_backward_pipelining_without_
interleaving and forward_backward_pipelining_with_interleaving) and the skipping rules of its
p2p_communication module, as a list of events in the text form of mt's train/pp_schedule.h:

    F m c / B m c                      a forward / backward of micro-batch m of model chunk c
    X [sn m c] [rn m c] [sp m c] [rp m c]
                                       one p2p call: send the output to the next stage, receive the
                                       output's gradient from it, send the input's gradient to the previous
                                       stage, receive the input from it

Megatron names a received tensor only by the list it is appended to (input_tensors[chunk],
output_tensor_grads[chunk]); its micro-batch is its position there. A p2p call whose every piece is
skipped (None tensors, recv flags off, or the stage at an end of the pipeline) moves nothing and is not
listed. Usage: megatron_pp_schedule.py P S M V  (prints stage S's events).
"""
import sys


class Stage:
    def __init__(self, P, s, M, V):
        self.P, self.s, self.M, self.V = P, s, M, V
        self.events = []
        self.inputs = [[] for _ in range(V)]   # input_tensors: micro-batch ids, as appended
        self.grads = [[] for _ in range(V)]    # output_tensor_grads
        self.vrank = 0                         # the virtual pipeline rank set before a p2p call

    # parallel_state's stage predicates; ignore_virtual=False looks at the virtual rank too (interleaved)
    def first_stage(self, ignore_virtual=False):
        if not ignore_virtual and self.V > 1 and self.vrank != 0:
            return False
        return self.s == 0

    def last_stage(self, ignore_virtual=False):
        if not ignore_virtual and self.V > 1 and self.vrank != self.V - 1:
            return False
        return self.s == self.P - 1

    def p2p(self, send_next=None, send_prev=None, recv_prev=None, recv_next=None):
        """send_next / send_prev: (m, c) or None; recv_prev / recv_next: the chunk whose list gets the
        received tensor, or None. Returns nothing: receives are recorded here."""
        parts = []
        if send_next is not None:
            parts.append("sn %d %d" % send_next)
        if recv_next is not None:
            parts.append("rn %d %d" % (len(self.grads[recv_next]), recv_next))
            self.grads[recv_next].append(len(self.grads[recv_next]))
        if send_prev is not None:
            parts.append("sp %d %d" % send_prev)
        if recv_prev is not None:
            parts.append("rp %d %d" % (len(self.inputs[recv_prev]), recv_prev))
            self.inputs[recv_prev].append(len(self.inputs[recv_prev]))
        if parts:
            self.events.append("X " + " ".join(parts))


def without_interleaving(st):
    P, s, M = st.P, st.s, st.M
    warmup = min(P - s - 1, M)
    remaining = M - warmup
    first, last = s == 0, s == P - 1
    f = b = 0

    # p2p_communication: recv_forward is nothing on the first stage, send_forward nothing on the last,
    # recv_backward nothing on the last, send_backward nothing on the first
    def recv_forward():
        st.p2p(recv_prev=None if first else 0)

    for _ in range(warmup):
        recv_forward()
        st.events.append("F %d 0" % f)
        st.p2p(send_next=None if last else (f, 0))
        f += 1
    if remaining > 0:
        recv_forward()
    for i in range(remaining):
        last_iteration = i == remaining - 1
        st.events.append("F %d 0" % f)
        # send_forward_recv_backward
        st.p2p(send_next=None if last else (f, 0), recv_next=None if last else 0)
        f += 1
        st.events.append("B %d 0" % b)
        if last_iteration:
            st.p2p(send_prev=None if first else (b, 0))                                   # send_backward
        else:
            st.p2p(send_prev=None if first else (b, 0), recv_prev=None if first else 0)  # send_backward_recv_forward
        b += 1
    for _ in range(warmup):
        st.p2p(recv_next=None if last else 0)  # recv_backward
        st.events.append("B %d 0" % b)
        st.p2p(send_prev=None if first else (b, 0))
        b += 1


def with_interleaving(st):
    P, s, M, V = st.P, st.s, st.M, st.V
    total = M * V
    all_warmup = M == P
    if all_warmup:
        warmup = total
    else:
        warmup = min((P - s - 1) * 2 + (V - 1) * P, total)
    remaining = total - warmup

    def chunk_id(k, forward):
        c = (k % (P * V)) // P   # Python's modulo: k may be negative
        return c if forward else V - c - 1

    def micro(k):
        return (k // (P * V)) * P + k % P

    # the first input (recv_forward of virtual rank 0: nothing on the first stage)
    st.vrank = 0
    st.p2p(recv_prev=None if st.first_stage() else 0)

    for k in range(warmup):
        c = chunk_id(k, True)
        st.vrank = c
        st.events.append("F %d %d" % (micro(k), c))
        out = (micro(k), c)
        nc = chunk_id(k + 1, True)
        recv_prev = True
        if st.first_stage(ignore_virtual=True) and nc == 0:
            recv_prev = False
        if k == total - 1:
            recv_prev = False
        if st.last_stage():   # the output of the last virtual stage is not sent
            out = None
        if k == warmup - 1 and not all_warmup:
            recv_next = not st.last_stage(ignore_virtual=True)
            st.p2p(send_next=out, recv_prev=nc if recv_prev else None, recv_next=V - 1 if recv_next else None)
        else:
            st.p2p(send_next=out, recv_prev=nc if recv_prev else None)

    for k in range(remaining):
        fk, bk = k + warmup, k
        fc, bc = chunk_id(fk, True), chunk_id(bk, False)
        st.vrank = fc
        st.events.append("F %d %d" % (micro(fk), fc))
        st.vrank = bc
        st.events.append("B %d %d" % (micro(bk), bc))
        st.vrank = fc
        out = None if st.last_stage() else (micro(fk), fc)
        st.vrank = bc
        grad = None if st.first_stage() else (micro(bk), bc)
        recv_prev = True
        if st.first_stage(ignore_virtual=True):
            nfc = chunk_id(fk - (P - 1), True)
            if nfc == V - 1:
                recv_prev = False
            nfc += 1
        else:
            nfc = chunk_id(fk + 1, True)
        recv_next = True
        if st.last_stage(ignore_virtual=True):
            nbc = chunk_id(bk - (P - 1), False)
            if nbc == 0:
                recv_next = False
            nbc -= 1
        else:
            nbc = chunk_id(bk + 1, False)
        if k == remaining - 1:
            recv_prev = False
        st.p2p(send_next=out, send_prev=grad, recv_prev=nfc if recv_prev else None,
               recv_next=nbc if recv_next else None)

    if all_warmup:
        # recv_backward for the last chunk: nothing on the last stage, whose last chunk is the last virtual stage
        st.vrank = V - 1
        st.p2p(recv_next=None if st.last_stage() else V - 1)
    for k in range(remaining, total):
        bc = chunk_id(k, False)
        st.vrank = bc
        st.events.append("B %d %d" % (micro(k), bc))
        grad = None if st.first_stage() else (micro(k), bc)
        nbc = chunk_id(k + 1, False)
        recv_next = True
        if st.last_stage(ignore_virtual=True) and nbc == V - 1:
            recv_next = False
        if k == total - 1:
            recv_next = False
        st.p2p(send_prev=grad, recv_next=nbc if recv_next else None)


def schedule(P, s, M, V):
    st = Stage(P, s, M, V)
    if V > 1:
        with_interleaving(st)
    elif P > 1:
        without_interleaving(st)
    else:   # forward_backward_no_pipelining: forward then backward, micro-batch by micro-batch
        for m in range(M):
            st.events += ["F %d 0" % m, "B %d 0" % m]
    return st.events


if __name__ == "__main__":
    P, S, M, V = map(int, sys.argv[1:5])
    print("\n".join(schedule(P, S, M, V)))
