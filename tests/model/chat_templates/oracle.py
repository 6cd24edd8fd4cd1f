#!/usr/bin/python3
"""Oracle for chat templates: Debian's python3-jinja2 renders each case as transformers'
apply_chat_template does (an ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and
loop controls; its tojson, json.dumps with non-ASCII kept; raise_exception; strftime_now).

    oracle.py CASES.json OUT.json

CASES.json: {"cases": [{"name", "template", "context"}]}. OUT.json: {"jinja2": version,
"results": [{"name", "text"} or {"name", "error"}]}. Exit 77 without jinja2 (the test skips).
"""
import json
import sys
from datetime import datetime

try:
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    sys.stderr.write("oracle.py: python3-jinja2 is not installed (apt-get install python3-jinja2)\n")
    sys.exit(77)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(format):
    return datetime.now().strftime(format)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: oracle.py CASES.json OUT.json")
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    results = []
    for c in cases:
        try:
            text = env.from_string(c["template"]).render(**c["context"])
            results.append({"name": c["name"], "text": text})
        except Exception as e:  # noqa: BLE001 - every failure is an answer: the renderer must fail too
            results.append({"name": c["name"], "error": f"{type(e).__name__}: {e}"})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump({"jinja2": jinja2.__version__, "results": results}, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
