"""Download one wheel from the registry (pip download --no-deps) and unpack chosen files of it.

Usage: python ci/engines/_wheel.py PACKAGE VERSION DEST PREFIX [PREFIX ...]

Writes DEST/src/<files under each PREFIX> and DEST/INSTALLED.json (package, version, wheel name,
wheel sha256, seconds since $SPECVERIFY_INSTALL_START, plus the JSON object in $SPECVERIFY_INSTALL_EXTRA). Files are unpacked byte for byte; nothing is edited.
"""
import hashlib
import json
import subprocess
import sys
import tempfile
import time
import os
import zipfile
from pathlib import Path

package, version, dest, *prefixes = sys.argv[1:]
start = float(os.environ.get("SPECVERIFY_INSTALL_START") or time.time())  # the calling script's start, if it gives one
dest = Path(dest)
with tempfile.TemporaryDirectory() as tmp:
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.11", "-d", tmp, f"{package}=={version}"], check=True)
    wheel = next(Path(tmp).glob("*.whl"))
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if any(n.startswith(p) for p in prefixes)]
        if not names:
            sys.exit(f"{wheel.name}: no file under {prefixes}")
        for n in names:
            zf.extract(n, dest / "src")
record = {"package": package, "version": version, "wheel": wheel.name, "sha256": sha,
          "files": len(names), "seconds": round(time.time() - start, 1),
          **json.loads(os.environ.get("SPECVERIFY_INSTALL_EXTRA") or "{}")}
(dest / "INSTALLED.json").write_text(json.dumps(record, indent=2) + "\n")
print(f"{package}=={version}: {len(names)} files from {wheel.name} into {dest}/src ({record['seconds']} s)")
