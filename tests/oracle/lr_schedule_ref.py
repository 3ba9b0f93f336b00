# lr_schedule_ref.py: an independent Python reference of Megatron's learning-rate and weight-decay
# schedule, written from the interoperability spec (section 4.3) and Megatron's documented behaviour:
# the argument checks for iteration- vs sample-based runs, the conversion of iteration counts to samples,
# and the OptimizerParamScheduler formulas (warmup, constant/linear/cosine/inverse-square-root/WSD decay,
# constant/linear/cosine weight-decay increment). Used by tests/pipeline/schedule-ref.sh.
import math


class ConfigError(Exception):
    pass


def need(cond, what):
    if not cond:
        raise ConfigError(what)


DEFAULTS = dict(
    lr=None, min_lr=0.0, lr_warmup_init=0.0, lr_decay_style="linear", lr_wsd_decay_style="exponential",
    train_iters=None, train_samples=None, global_batch_size=None, lr_decay_iters=None, lr_decay_samples=None,
    lr_warmup_fraction=None, lr_warmup_iters=0, lr_warmup_samples=0, lr_wsd_decay_iters=None,
    lr_wsd_decay_samples=None, weight_decay=0.01, start_weight_decay=None, end_weight_decay=None,
    weight_decay_incr_style="constant",
)


class Schedule:
    """Megatron's scheduler state after construction (step(0)); lr(n) / wd(n) for n samples stepped."""

    def __init__(self, **kw):
        a = dict(DEFAULTS)
        a.update(kw)
        need(a["lr"] is not None, "lr required")
        need(a["global_batch_size"] is not None and a["global_batch_size"] > 0, "gbs")
        # argument validation
        if a["weight_decay_incr_style"] == "constant":
            need(a["start_weight_decay"] is None and a["end_weight_decay"] is None, "wd start/end with constant")
            a["start_weight_decay"] = a["end_weight_decay"] = a["weight_decay"]
        else:
            need(a["start_weight_decay"] is not None and a["end_weight_decay"] is not None, "wd start/end missing")
        if a["train_iters"]:
            need(not a["train_samples"], "both iters and samples")
            need(a["lr_decay_samples"] is None, "decay samples in iteration run")
            need(a["lr_warmup_samples"] == 0, "warmup samples in iteration run")
            if a["lr_warmup_fraction"] is not None:
                need(a["lr_warmup_iters"] == 0, "fraction and warmup iters")
        if a["train_samples"]:
            need(not a["train_iters"], "both iters and samples")
            need(a["lr_decay_iters"] is None, "decay iters in sample run")
            need(a["lr_warmup_iters"] == 0, "warmup iters in sample run")
            if a["lr_warmup_fraction"] is not None:
                need(a["lr_warmup_samples"] == 0, "fraction and warmup samples")
        # conversion to samples
        gbs = a["global_batch_size"]
        if a["train_iters"]:
            decay_iters = a["lr_decay_iters"] if a["lr_decay_iters"] is not None else a["train_iters"]
            decay = decay_iters * gbs
            wd_steps = a["train_iters"] * gbs
            wsd = a["lr_wsd_decay_iters"] * gbs if a["lr_wsd_decay_iters"] is not None else None
            warmup = (a["lr_warmup_fraction"] * decay if a["lr_warmup_fraction"] is not None
                      else a["lr_warmup_iters"] * gbs)
        elif a["train_samples"]:
            decay = a["lr_decay_samples"] if a["lr_decay_samples"] is not None else a["train_samples"]
            wd_steps = a["train_samples"]
            wsd = a["lr_wsd_decay_samples"]
            warmup = (a["lr_warmup_fraction"] * decay if a["lr_warmup_fraction"] is not None
                      else a["lr_warmup_samples"])
        else:
            raise ConfigError("neither iters nor samples")
        self.init, self.max, self.min = a["lr_warmup_init"], float(a["lr"]), a["min_lr"]
        self.warmup, self.decay, self.wsd = warmup, decay, wsd
        self.style, self.wsd_style = a["lr_decay_style"], a["lr_wsd_decay_style"]
        self.start_wd, self.end_wd = a["start_weight_decay"], a["end_weight_decay"]
        self.wd_steps, self.wd_style = wd_steps, a["weight_decay_incr_style"]
        need(self.min >= 0.0, "min lr")
        need(self.max >= self.min, "max < min")
        need(self.init <= self.max, "init > max")
        need(self.decay > 0, "decay steps")
        need(self.warmup < self.decay, "warmup >= decay")
        if self.style == "WSD":
            # Megatron asserts only "not None"; a zero length would divide by zero once annealing starts
            need(self.wsd is not None and self.wsd > 0, "wsd length")
        need(self.start_wd >= 0.0, "start wd")
        need(self.end_wd >= self.start_wd, "end wd")

    def lr(self, n):
        if self.warmup > 0 and n <= self.warmup:
            return self.init + ((self.max - self.init) * float(n) / float(self.warmup))
        if self.style == "constant":
            return self.max
        if n > self.decay:
            return self.min
        if self.style == "inverse-square-root":
            w = max(self.warmup, 1)
            k = max(n, 1)
            v = self.max * w ** 0.5 / (k ** 0.5)
            return max(self.min, v)
        ratio = float(n - self.warmup) / float(self.decay - self.warmup)
        assert 0.0 <= ratio <= 1.0
        delta = self.max - self.min
        if self.style == "linear":
            c = 1.0 - ratio
        elif self.style == "cosine":
            c = 0.5 * (math.cos(math.pi * ratio) + 1.0)
        elif self.style == "WSD":
            start = self.decay - self.wsd
            if n <= start:
                c = 1.0
            else:
                r = float(n - start) / float(self.wsd)
                c = {"linear": lambda: 1.0 - r,
                     "cosine": lambda: 0.5 * (math.cos(math.pi * r) + 1.0),
                     "exponential": lambda: (2.0 * math.pow(0.5, r)) - 1.0,
                     "minus_sqrt": lambda: 1.0 - math.sqrt(r)}[self.wsd_style]()
        else:
            raise ValueError(self.style)
        return self.min + c * delta

    def wd(self, n):
        if n > self.wd_steps:
            return self.end_wd
        if self.wd_style == "constant":
            return self.end_wd
        ratio = float(n) / float(self.wd_steps)
        delta = self.end_wd - self.start_wd
        if self.wd_style == "linear":
            c = ratio
        else:
            c = 0.5 * (math.cos(math.pi * (1 - ratio)) + 1.0)
        return self.start_wd + c * delta
