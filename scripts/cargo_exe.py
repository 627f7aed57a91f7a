#!/usr/bin/env python3
"""Where cargo put the executables of named targets, from cargo's JSON messages on stdin
(`cargo build --message-format=json...`).

    ... | python3 scripts/cargo_exe.py NAME             prints its path (nothing: none built)
    ... | python3 scripts/cargo_exe.py --into DIR NAME...
                                                         copies each to DIR/NAME; exits 1
                                                         naming the first one cargo did not build
"""
import json
import os
import shutil
import sys

args = sys.argv[1:]
into = None
if args[:1] == ["--into"]:
    into, args = args[1], args[2:]
found = {}
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        found[m["target"]["name"]] = m["executable"]
if into is None:
    print(found.get(args[0], ""))
    sys.exit(0)
for name in args:
    if name not in found:
        sys.exit(f"stage: cargo built no executable named {name}")
    shutil.copy(found[name], os.path.join(into, name))
