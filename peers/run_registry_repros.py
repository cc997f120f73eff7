"""Run the repro scripts `spmd-check registry --repro-dir` wrote, and store
what each did in the registry file (its `repros`): reproduced (exit 0: the
library chose the claimed placement and gave another value) or not, with
the script's last line. Usage: run_registry_repros.py PRUNED DIR OUT."""

import gzip
import json
import os
import subprocess
import sys


def main():
    pruned, folder, out = sys.argv[1:4]
    with open(pruned) as f:
        doc = json.load(f)
    with open(os.path.join(folder, "index.json")) as f:
        index = json.load(f)
    repros = []
    for item in index:
        p = subprocess.run([sys.executable, os.path.join(folder, item["file"])],
                           capture_output=True, text=True, timeout=300)
        lines = (p.stdout + p.stderr).strip().splitlines() or ["(no output)"]
        says = lines[-1] if p.returncode in (0, 1) else f"the script failed: {lines[-1]}"
        repros.append({"op": item["op"], "args": item["args"], "inputs": item["inputs"],
                       "output": item["output"], "reproduced": p.returncode == 0,
                       "says": says[:300]})
        print(f"{item['op']}({item['args']}) {item['inputs']} -> {item['output']}: {says}",
              file=sys.stderr)
    doc["repros"] = repros
    text = json.dumps(doc, separators=(",", ":")) + "\n"
    if out.endswith(".gz"):
        # No name or time in the header: the same text gives the same bytes.
        with open(out, "wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as z:
            z.write(text.encode())
    else:
        with open(out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
