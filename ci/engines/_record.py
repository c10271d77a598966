"""Write DEST/INSTALLED.json for an engine installed into its own venv (decoder-kind engines).

Usage: python ci/engines/_record.py DEST PACKAGE VERSION [EXTRA_JSON]

Records package, version, the exact versions pip installed in DEST/venv (``pip freeze``), the converted
model folders under DEST/models, and seconds since $SPECVERIFY_INSTALL_START (plus EXTRA_JSON's keys).
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

dest, package, version, *extra = sys.argv[1:]
dest = Path(dest)
start = float(os.environ.get("SPECVERIFY_INSTALL_START") or time.time())
freeze = subprocess.run([str(dest / "venv" / "bin" / "python"), "-m", "pip", "freeze"], check=True,
                        capture_output=True, text=True).stdout.split()
models = sorted(p.name for p in (dest / "models").iterdir()) if (dest / "models").is_dir() else []
record = {"package": package, "version": version, "seconds": round(time.time() - start, 1),
          "models": models, "pip_freeze": freeze, **(json.loads(extra[0]) if extra else {})}
(dest / "INSTALLED.json").write_text(json.dumps(record, indent=2) + "\n")
print(f"{package}=={version} into {dest} ({record['seconds']} s, {len(freeze)} packages, models {models})")
