"""Write INSTALLED.json for the llama.cpp / llama-cpp-python install (like ci/engines/_wheel.py does).

Usage: python ci/engines/llama_cpp/record.py INSTALL_DIR VERSION SDIST_SHA256 'STEP_SECONDS_JSON'

Records package, version, sdist name and sha256, total seconds since $SPECVERIFY_INSTALL_START,
seconds per step, the llama.cpp commit the sdist vendors, the sha256 of the audited source copies
(variants.json), of the converted models and of the built binaries (``binaries``: path relative to
INSTALL_DIR -> sha256; ``build/bin/llama-server`` is what ``verifier.server.launch`` starts).
"""
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

BINARIES = ("llama-speculative", "llama-server")  # the cmake targets ci/engines/llama-cpp.sh builds

dest, version, sha, steps = Path(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
start = float(os.environ.get("SPECVERIFY_INSTALL_START") or time.time())
cmake_cache = (dest / "build" / "CMakeCache.txt").read_text(errors="replace")
build_info = dest / "build" / "common" / "build-info.cpp"
commit = re.search(r'LLAMA_COMMIT\s*=\s*"([^"]*)"', build_info.read_text()) if build_info.is_file() else None
record = {
    "package": "llama-cpp-python", "version": version, "sdist": f"llama_cpp_python-{version}.tar.gz", "sha256": sha,
    "seconds": round(time.time() - start, 1), "step_seconds": steps,
    "llama_cpp_commit": commit.group(1) if commit else None,
    "cmake_native": "GGML_NATIVE:BOOL=ON" in cmake_cache,
    "variants": json.loads((dest / "variants.json").read_text()),
    "models": {p.stem: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((dest / "models").glob("*.gguf"))},
    "binaries": {f"build/bin/{name}": hashlib.sha256((dest / "build" / "bin" / name).read_bytes()).hexdigest()
                 for name in BINARIES},
}
(dest / "INSTALLED.json").write_text(json.dumps(record, indent=2) + "\n")
print(f"llama-cpp-python=={version} (llama.cpp {record['llama_cpp_commit']}): installed in {dest} ({record['seconds']} s; steps {steps})")
