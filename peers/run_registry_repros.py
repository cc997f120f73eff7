"""Run the repro scripts `spmd-check registry --repro-dir` wrote, and store
what each did in the registry file (its `repros`): reproduced (exit 0: the
library chose the claimed placement and gave another value) or not, with
the script's last line. Usage: run_registry_repros.py PRUNED DIR OUT
[--backward]: with --backward, the scripts of the incorrect backward rows
(SPEC.md §22.6) instead, stored in `backward_repros`."""

import json
import os
import subprocess
import sys

from registry_values import load_doc, save_doc


def main():
    pruned, folder, out = sys.argv[1:4]
    backward = "--backward" in sys.argv[4:]
    doc = load_doc(pruned)
    with open(os.path.join(folder, "index.json")) as f:
        index = json.load(f)
    repros = []
    for item in index:
        if bool(item.get("backward")) != backward:
            continue
        p = subprocess.run([sys.executable, os.path.join(folder, item["file"])],
                           capture_output=True, text=True, timeout=300)
        lines = (p.stdout + p.stderr).strip().splitlines() or ["(no output)"]
        says = lines[-1] if p.returncode in (0, 1) else f"the script failed: {lines[-1]}"
        repros.append({"op": item["op"], "args": item["args"], "inputs": item["inputs"],
                       "output": item["output"], "reproduced": p.returncode == 0,
                       "says": says[:300]})
        print(f"{item['op']}({item['args']}) {item['inputs']} -> {item['output']}: {says}",
              file=sys.stderr)
    doc["backward_repros" if backward else "repros"] = repros
    save_doc(out, doc)


if __name__ == "__main__":
    main()
