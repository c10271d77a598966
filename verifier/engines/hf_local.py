"""Local, offline checkpoints for the ``transformers`` engine's draft paths the shipped pair cannot exercise.

Built once by ``ci/engines/transformers.sh`` (``python -m verifier.engines.hf_local DEST``) into
``DEST = engines_dir() / "transformers-<version>"``; no hub access:

``retokenized-draft/``
    The shipped draft with **its own tokenizer and vocabulary**: token ids permuted (a seeded
    permutation of every non-special id) and :data:`EXTRA_TOKENS` vocabulary entries the target
    does not have appended (vocab 384 + 16 = 400).  Embedding / LM-head rows move with their
    tokens, so on the strings both vocabularies share its law is the shipped draft's; the extra
    rows are random.  transformers' ``assistant_tokenizer=`` / ``tokenizer=`` path (universal
    assisted generation, :class:`~transformers.generation.candidate_generator.UniversalSpeculativeDecodingGenerator`)
    maps the two vocabularies by token string.
``gemma4/target/``, ``gemma4/assistant/``
    A tiny random ``Gemma4ForCausalLM`` (vocab :data:`GEMMA4_VOCAB`) and a tiny random
    ``Gemma4AssistantForCausalLM`` for it: ``generate(assistant_model=...)`` then runs transformers'
    ``SinglePositionMultiTokenCandidateGenerator`` (the assistant drafts from the target's last hidden
    state and shared KV states, so it is no standalone causal LM).  Random weights with
    ``initializer_range`` :data:`GEMMA4_INIT` give first-token laws with top probability ~0.2-0.5.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

__all__ = ["EXTRA_TOKENS", "GEMMA4_VOCAB", "build_all", "retokenized_draft", "tiny_gemma4", "GEMMA4_PROMPT"]

EXTRA_TOKENS = 16  # vocabulary entries of the retokenized draft that the target does not have
GEMMA4_VOCAB = 64  # tiny Gemma4 pair: small enough for exact first-two-token laws
GEMMA4_INIT = 0.2  # initializer_range of the random Gemma4 pair (0.05: nearly uniform laws; 0.3: nearly one-hot)
GEMMA4_PROMPT = (2, 5, 7)  # bos + two ids: the audit prompt of the Gemma4 pair (it has no tokenizer)
SEED = 0


def retokenized_draft(out: str | Path, seed: int = SEED) -> Path:
    """Write the shipped draft with a permuted, extended vocabulary (its own tokenizer) to ``out``."""
    import numpy as np
    import torch
    from safetensors.torch import load_file, save_file

    from verifier.models.shipped_paths import shipped_checkpoint

    src, out = shipped_checkpoint("draft"), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = json.loads((src / "tokenizer.json").read_text())
    vocab: dict[str, int] = tok["model"]["vocab"]
    special = {t["id"] for t in tok["added_tokens"]}
    old_ids = sorted(i for i in vocab.values() if i not in special)
    perm = dict(zip(old_ids, np.random.default_rng(seed).permutation(old_ids).tolist()))
    perm.update({i: i for i in special})
    size = len(vocab)
    tok["model"]["vocab"] = {s: perm[i] for s, i in vocab.items()}
    for j in range(EXTRA_TOKENS):
        tok["model"]["vocab"][f"zq{j:02d}"] = size + j  # byte-level strings no merge of the target produces
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    shutil.copy(src / "tokenizer_config.json", out / "tokenizer_config.json")
    config = json.loads((src / "config.json").read_text())
    config["vocab_size"] = size + EXTRA_TOKENS
    (out / "config.json").write_text(json.dumps(config, indent=2))
    shutil.copy(src / "generation_config.json", out / "generation_config.json")
    weights = load_file(str(src / "model.safetensors"))
    gen = torch.Generator().manual_seed(seed)
    for name, w in list(weights.items()):
        if w.ndim == 2 and w.shape[0] == size:  # embedding (and an untied LM head): rows follow their tokens
            new = torch.empty((size + EXTRA_TOKENS, w.shape[1]), dtype=w.dtype)
            index = torch.tensor([perm[i] for i in range(size)])
            new[index] = w
            new[size:] = torch.randn((EXTRA_TOKENS, w.shape[1]), generator=gen, dtype=w.dtype) * w.std()
            weights[name] = new.contiguous()
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "PERMUTATION.json").write_text(json.dumps({"shipped_id_to_draft_id": perm, "extra_tokens": EXTRA_TOKENS}))
    return out


def tiny_gemma4(out: str | Path, seed: int = SEED) -> Path:
    """Write a tiny random ``Gemma4ForCausalLM`` (``out/target``) and ``Gemma4AssistantForCausalLM`` (``out/assistant``).

    Raises
    ------
    ImportError
        The installed transformers has no Gemma4 assistant (it arrived in transformers 5.x).
    """
    import torch
    from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM, Gemma4ForCausalLM, Gemma4TextConfig

    out = Path(out)
    common = dict(vocab_size=GEMMA4_VOCAB, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                  vocab_size_per_layer_input=0, hidden_size_per_layer_input=0, sliding_window=16,
                  layer_types=["sliding_attention", "full_attention"], max_position_embeddings=128,
                  pad_token_id=0, eos_token_id=1, bos_token_id=2, initializer_range=GEMMA4_INIT)
    torch.manual_seed(seed)
    target = Gemma4ForCausalLM(Gemma4TextConfig(hidden_size=32, intermediate_size=64, **common)).eval()
    assistant = Gemma4AssistantForCausalLM(Gemma4AssistantConfig(
        text_config=Gemma4TextConfig(hidden_size=16, intermediate_size=32, **common), backbone_hidden_size=32)).eval()
    target.save_pretrained(out / "target")
    assistant.save_pretrained(out / "assistant")
    return out


def build_all(dest: str | Path) -> dict:
    """Build every local checkpoint into ``dest`` and write its ``INSTALLED.json``; returns the record."""
    import transformers

    dest = Path(dest)
    start = time.perf_counter()
    dest.mkdir(parents=True, exist_ok=True)
    retokenized_draft(dest / "retokenized-draft")
    gemma4 = None
    try:
        tiny_gemma4(dest / "gemma4")
    except ImportError as exc:
        gemma4 = f"not built: {exc}"
    record = {"package": "transformers", "version": transformers.__version__, "seconds": round(time.perf_counter() - start, 1),
              "installed_into": "the harness's own environment (transformers is a dependency)",
              "models": {"retokenized-draft": "shipped draft, permuted ids + 16 extra tokens (vocab 400)",
                         "gemma4": gemma4 or f"random Gemma4ForCausalLM + Gemma4AssistantForCausalLM, vocab {GEMMA4_VOCAB}"}}
    (dest / "INSTALLED.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


if __name__ == "__main__":  # python -m verifier.engines.hf_local DEST
    if len(sys.argv) != 2:
        sys.exit("usage: python -m verifier.engines.hf_local DEST")
    print(json.dumps(build_all(sys.argv[1]), indent=2))
