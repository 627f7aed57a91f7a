#!/usr/bin/env python3
"""Prints where cargo put the executable of target NAME, from cargo's JSON messages on stdin
(`cargo build --message-format=json...`); prints nothing when it built none by that name.

    cargo build --release --test gpu --message-format=json | python3 scripts/cargo_exe.py gpu
"""
import json
import sys

name = sys.argv[1]
found = ""
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == name:
        found = m["executable"]
print(found)
