"""Cross-check: run every fixture case that has a `job` through
`spmd-check run JOB --json` and compare its per-rank output (and backward,
where the job spells one) with the recorded real values, exactly.

Usage: python3 peers/check_jobs.py [path/to/spmd-check]
(default target/release/spmd-check; build it with `cargo build --release`).
Standard library only. Exit 1 if any job is refused or disagrees.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile
from fractions import Fraction

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def exact(v):
    return [exact(x) for x in v] if isinstance(v, list) else Fraction(v)


def main():
    exe = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "spmd-check")
    ok, bad = 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        job_path = os.path.join(tmp, "job.json")
        for f in sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "*.json"))):
            for c in json.load(open(f))["cases"]:
                if not c.get("job"):
                    continue
                json.dump(c["job"], open(job_path, "w"))
                p = subprocess.run([exe, "run", job_path, "--json"], capture_output=True, text=True)
                where = f"{os.path.basename(f)} {c['id']}"
                if p.returncode != 0:
                    bad += 1
                    print(f"REFUSED {where}: {(p.stdout + p.stderr).strip()[:300]}")
                    continue
                out, real, why = json.loads(p.stdout), c["real"], []
                if exact(out["output"]["per_rank"]) != exact(real["output_per_rank"]):
                    why.append(f"output {out['output']['per_rank']} vs real {real['output_per_rank']}")
                if "backward" in c["job"] and real.get("transpose_per_rank") is not None:
                    got = out.get("backward") or [{"per_rank": None}]
                    if got[0]["per_rank"] is None or exact(got[0]["per_rank"]) != exact(real["transpose_per_rank"]):
                        why.append(f"backward {got[0]['per_rank']} vs real {real['transpose_per_rank']}")
                if why:
                    bad += 1
                    print(f"DIFFERS {where}: {'; '.join(why)}")
                else:
                    ok += 1
    print(f"{ok} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
