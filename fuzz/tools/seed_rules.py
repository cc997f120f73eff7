#!/usr/bin/env python3
"""Split the example rule files into one rule per seed (smaller inputs fuzz
faster), and write a JSON twin of each, into fuzz/corpus/rule_file/.

Run from the repository root: python3 fuzz/tools/seed_rules.py
"""
import glob
import json
import os
import re
import tomllib

out = "fuzz/corpus/rule_file"
os.makedirs(out, exist_ok=True)
for path in sorted(glob.glob("examples/*.toml") + glob.glob("examples/patterns/*.toml")):
    text = open(path).read()
    # Blocks start at a `[[rule]]` line; comments before the first are dropped.
    blocks = re.split(r"(?m)^(?=\[\[rule\]\]\s*$)", text)
    blocks = [b for b in blocks if b.startswith("[[rule]]")]
    stem = os.path.splitext(path.replace("examples/", "").replace("/", "_"))[0]
    for i, b in enumerate(blocks):
        # Trailing comment lines belong to the next rule.
        b = re.sub(r"(\n#[^\n]*)+\n*$", "\n", b)
        name = f"{stem}_{i}"
        open(os.path.join(out, name + ".toml"), "w").write(b)
        open(os.path.join(out, name + ".json"), "w").write(
            json.dumps(tomllib.loads(b), indent=1) + "\n"
        )
