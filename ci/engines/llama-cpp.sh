#!/usr/bin/env bash
# Install llama.cpp (as vendored in the llama-cpp-python 0.3.36 sdist, llama.cpp commit 0c1e570) for the
# `llama.cpp` and `llama-cpp-python` decoder adapters. One build serves both:
#  1. pip download the sdist (no deps; 74 MB, has llama.cpp and its convert_hf_to_gguf.py), unpack to src/;
#  2. cmake + ninja, -j${SPECVERIFY_BUILD_JOBS:-2}, one build of only the targets needed: llama-speculative
#     (which brings the shared libllama/libggml that llama-cpp-python loads through LLAMA_CPP_LIB_PATH) and
#     llama-server (OpenAI-compatible HTTP server, for `specverify audit --url`; docs/servers.md). GGML_NATIVE,
#     no tests, no curl/openssl, no web UI (neither npm nor the prebuilt-asset download: the server serves an
#     empty UI; its API is unaffected); LLAMA_BUILD_TOOLS=ON only because the server lives under tools/ (other
#     tools are configured, not built). This is the long step (about 25 min on 2 free cores); rerunning the
#     script on an existing folder rebuilds nothing that is up to date;
#  3. ci/engines/llama_cpp/variants.py: copies of examples/speculative/speculative.cpp that print token ids
#     (two fprintf lines, algorithm untouched) plus the controls (one defect patched each), in bin/;
#  4. ci/engines/llama_cpp/convert.py: the shipped HF checkpoints -> models/{target,draft}.gguf, f32, with
#     the sdist's own converter (a wrapper supplies the gpt-2 pre-tokenizer it does not recognise);
#  5. venv/ for llama-cpp-python: its small Python deps (numpy, diskcache, jinja2, typing-extensions) and a
#     .pth pointing at the sdist's llama_cpp/ package (nothing is compiled a second time).
# Needs: cmake >= 3.14, a C++17 compiler, the current `python` with torch + transformers (the converter).
# Destination: ${SPECVERIFY_ENGINES_DIR:-<repo>/.engines}/llama-cpp-python-0.3.36/.
set -euo pipefail
export SPECVERIFY_INSTALL_START=$(date +%s.%N)
cd "$(dirname "$0")/../.."
version=0.3.36
dest="${SPECVERIFY_ENGINES_DIR:-$PWD/.engines}/llama-cpp-python-$version"
jobs="${SPECVERIFY_BUILD_JOBS:-2}"
sdist="$dest/dl/llama_cpp_python-$version.tar.gz"
mkdir -p "$dest"
rm -f "$dest/INSTALLED.json"

t0=$(date +%s)
[ -f "$sdist" ] || python -m pip download -q --no-deps --no-binary=:all: -d "$dest/dl" "llama-cpp-python==$version"
sha=$(sha256sum "$sdist" | cut -d' ' -f1)
if [ "$(cat "$dest/src/.sdist-sha256" 2>/dev/null)" != "$sha" ]; then  # unpack once: fresh mtimes would rebuild all
  rm -rf "$dest/src" "$dest/build" && mkdir -p "$dest/src"
  tar xzf "$sdist" -C "$dest/src" --strip-components=1
  echo "$sha" > "$dest/src/.sdist-sha256"
fi
t1=$(date +%s)

generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$dest/src/vendor/llama.cpp" -B "$dest/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_APP=OFF \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
nice -n 10 cmake --build "$dest/build" -j"$jobs" --target llama-speculative llama-server
t2=$(date +%s)
nice -n 10 python ci/engines/llama_cpp/variants.py "$dest"
t3=$(date +%s)

mkdir -p "$dest/models"
for m in target draft; do
  HF_HUB_OFFLINE=1 python ci/engines/llama_cpp/convert.py "$dest/src/vendor/llama.cpp" "verifier/models/shipped/$m" \
    "$dest/models/$m.gguf" >/dev/null 2>"$dest/models/$m.convert.log"
done
t4=$(date +%s)

rm -rf "$dest/venv"
python -m venv "$dest/venv"
"$dest/venv/bin/python" -m pip install -q numpy diskcache jinja2 typing-extensions
site=$("$dest/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$dest/src" > "$site/llama_cpp_sdist.pth"
LLAMA_CPP_LIB_PATH="$dest/build/bin" "$dest/venv/bin/python" -c "import llama_cpp; assert llama_cpp.__version__ == '$version'"
t5=$(date +%s)

python ci/engines/llama_cpp/record.py "$dest" "$version" "$sha" \
  "{\"download\": $((t1 - t0)), \"build\": $((t2 - t1)), \"variants\": $((t3 - t2)), \"convert\": $((t4 - t3)), \"venv\": $((t5 - t4)), \"jobs\": $jobs}"
