#!/usr/bin/env python3
"""Builds every Rust block of the README and of the guide (docs/guide/*.md) as a user would: each
block is pasted as a program of a new crate that adds `oxccl` by path, with the features given,
and the crate is built (`cargo build --examples`). The doctests (`cargo test -p oxccl --doc`)
compile the same blocks inside the workspace, where the tests' dev-dependencies turn every
feature on; this build shows what a user with fewer features gets.

Usage: python3 scripts/doc-programs.py [--features mock,trace-reader] [--no-default-features]
Pages whose programs need NCCL (NCCL_PAGES) are left out of a build without the `nccl` feature.
The crate is made under target/doc-programs (cargo's target folder is CARGO_TARGET_DIR's, as
for the workspace)."""
import argparse
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(
    os.path.join("docs", "guide", f)
    for f in os.listdir(os.path.join(ROOT, "docs", "guide"))
    if f.endswith(".md")
)
# Pages whose every program needs the `nccl` feature (Comm, Nccl).
NCCL_PAGES = {os.path.join("docs", "guide", "comm.md"), os.path.join("docs", "guide", "pytorch.md")}
BLOCK = re.compile(r"^```rust[^\n]*\n(.*?)^```", re.S | re.M)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--features", default="")
    p.add_argument("--no-default-features", action="store_true")
    a = p.parse_args()
    features = [f for f in a.features.split(",") if f]
    with_nccl = "nccl" in features or not a.no_default_features

    crate = os.path.join(ROOT, "target", "doc-programs")
    shutil.rmtree(crate, ignore_errors=True)
    os.makedirs(os.path.join(crate, "examples"))
    os.makedirs(os.path.join(crate, "src"))
    with open(os.path.join(crate, "src", "lib.rs"), "w") as f:
        f.write("//! The README's and the guide's programs, one example each.\n")
    dep = '{ path = "%s"' % os.path.join(ROOT, "oxccl")
    if a.no_default_features:
        dep += ", default-features = false"
    if features:
        dep += ", features = [%s]" % ", ".join('"%s"' % f for f in features)
    dep += " }"
    with open(os.path.join(crate, "Cargo.toml"), "w") as f:
        # Its own workspace: the folder lies inside this repository's.
        f.write(
            '[package]\nname = "doc-programs"\nversion = "0.0.0"\nedition = "2024"\n'
            'publish = false\n\n[dependencies]\noxccl = %s\n\n'
            '# A warning in a program a user pastes is a fault of the page.\n'
            '[lints.rust]\nwarnings = "deny"\n\n[workspace]\n' % dep
        )
    # The workspace's versions of every dependency.
    shutil.copy(os.path.join(ROOT, "Cargo.lock"), os.path.join(crate, "Cargo.lock"))

    count = 0
    for page in PAGES:
        if page in NCCL_PAGES and not with_nccl:
            print(f"{page}: left out (its programs need the `nccl` feature)")
            continue
        with open(os.path.join(ROOT, page)) as f:
            blocks = BLOCK.findall(f.read())
        for i, body in enumerate(blocks):
            if "fn main" not in body:
                sys.exit(f"{page}: Rust block {i + 1} has no `fn main`: every block is a whole program")
            name = re.sub(r"[^a-z0-9]+", "_", page.lower().replace(".md", "")) + f"_{i + 1}"
            with open(os.path.join(crate, "examples", name + ".rs"), "w") as f:
                f.write(body)
            count += 1
        print(f"{page}: {len(blocks)} program(s)")
    env = dict(os.environ)
    env.setdefault("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    cmd = ["cargo", "build", "--quiet", "--examples"]
    print(f"building {count} programs: oxccl = {dep}")
    r = subprocess.run(cmd, cwd=crate, env=env)
    sys.exit(r.returncode)


if __name__ == "__main__":
    main()
