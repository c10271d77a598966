#!/usr/bin/env bash
# The `transformers` engine runs in the harness's own environment (transformers is a dependency), so nothing
# is downloaded. This builds, offline, the local checkpoints of its draft-unknown modes (about 30 s):
#   retokenized-draft/  the shipped draft with its own tokenizer (permuted ids + 16 extra tokens; mode=assistant_tokenizer)
#   gemma4/{target,assistant}/  a tiny random Gemma4ForCausalLM + Gemma4AssistantForCausalLM (mode=gemma4_assistant)
# Destination: ${SPECVERIFY_ENGINES_DIR:-<repo>/.engines}/transformers-<version>/ (with INSTALLED.json).
set -euo pipefail
cd "$(dirname "$0")/../.."
version=$(python -c "import importlib.metadata as m; print(m.version('transformers'))")
dest="${SPECVERIFY_ENGINES_DIR:-$PWD/.engines}/transformers-$version"
rm -rf "$dest" && mkdir -p "$dest"
python -m verifier.engines.hf_local "$dest"
