#!/usr/bin/env python3
"""chat_template_ref.py: renders chat templates with jinja2 as transformers (< 4.45) configures it for
apply_chat_template (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its tojson,
raise_exception and strftime_now), and compares each rendering with mt's (build/tests/test_chat_template
--render). Usage: chat_template_ref.py HELPER TEMPLATE... ; prints PASS/FAIL lines, one per template and
message list; the differences go to stderr."""
import json
import subprocess
import sys
import tempfile
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Raised(Exception):
    pass


def raise_exception(message):
    raise Raised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda f: datetime.now().strftime(f)

CONVERSATIONS = {
    "one user turn": [{"role": "user", "content": "Hello there"}],
    "system, user, assistant, user": [
        {"role": "system", "content": "  You answer briefly.\n"},
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": " It is 4. "},
        {"role": "user", "content": "And 3 + 3? Thé \"quotes\" and\nnewlines"},
    ],
    "user, assistant": [
        {"role": "user", "content": "def f(x):"},
        {"role": "assistant", "content": "    return x"},
    ],
    "two users in a row": [
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b"},
    ],
    "a system turn only": [{"role": "system", "content": "sys"}],
    "a tool turn": [{"role": "user", "content": "x"}, {"role": "tool", "content": "{}"}],
}


def main():
    helper, templates = sys.argv[1], sys.argv[2:]
    bad = 0
    for path in templates:
        src = open(path, encoding="utf-8").read()
        tmpl = env.from_string(src)
        name = path.rsplit("/", 1)[-1]
        for label, msgs in CONVERSATIONS.items():
            for gen in (True, False):
                try:
                    want = "OK\n" + tmpl.render(messages=msgs, add_generation_prompt=gen, bos_token="<s>",
                                               eos_token="</s>", tools=None, documents=None)
                except Raised as e:
                    want = "RAISED\n" + str(e)
                with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8") as f:
                    json.dump(msgs, f)
                    f.flush()
                    args = [helper, "--render", path, f.name, "<s>", "</s>"] + (["--gen"] if gen else [])
                    got = subprocess.run(args, capture_output=True).stdout.decode("utf-8", "replace")
                what = "%s, %s%s" % (name, label, ", add_generation_prompt" if gen else "")
                if got == want:
                    print("PASS %s" % what)
                else:
                    bad += 1
                    print("FAIL %s" % what)
                    print("--- %s\njinja2: %r\nmt:     %r" % (what, want, got), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
