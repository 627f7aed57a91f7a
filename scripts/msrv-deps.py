#!/usr/bin/env python3
"""Every crate the workspace's packages build with (normal and build dependencies, as locked)
declares a minimum Rust no newer than the workspace's `rust-version`; exits 1 naming any that
does. With `--toolchain`, prints that version as a rustup toolchain name instead (`1.95.0`), so
CI builds the workspace with exactly the declared minimum."""
import json
import subprocess
import sys


def version(text):
    parts = [int(x) for x in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


meta = json.loads(subprocess.run(
    ["cargo", "metadata", "--format-version", "1", "--locked",
     "--filter-platform", "x86_64-unknown-linux-gnu"],
    check=True, capture_output=True, text=True).stdout)
packages = {p["id"]: p for p in meta["packages"]}
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
members = meta["workspace_members"]
declared = {packages[m]["rust_version"] for m in members}
if len(declared) != 1 or None in declared:
    sys.exit(f"every package should inherit one rust-version, found {sorted(map(str, declared))}")
ours = declared.pop()
if sys.argv[1:] == ["--toolchain"]:
    print(".".join(str(x) for x in version(ours)))
    sys.exit(0)

seen, todo = set(), list(members)
while todo:
    node = nodes[todo.pop()]
    for dep in node["deps"]:
        kinds = {k["kind"] for k in dep["dep_kinds"]}
        if kinds & {None, "build"} and dep["pkg"] not in seen:
            seen.add(dep["pkg"])
            todo.append(dep["pkg"])

newer = sorted(
    (packages[p]["name"], packages[p]["version"], packages[p]["rust_version"])
    for p in seen
    if packages[p].get("rust_version") and version(packages[p]["rust_version"]) > version(ours)
)
for name, ver, rv in newer:
    print(f"{name} {ver} needs Rust {rv}, newer than the workspace's rust-version {ours}")
if newer:
    sys.exit(1)
print(f"every dependency builds with Rust {ours} (the workspace's rust-version), as declared")
