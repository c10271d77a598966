"""Shipped checkpoints, checkpoint loading errors and TabularCausalLM semantics."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
import torch

from verifier.errors import InvalidArgumentError, ModelLoadError
from verifier.exact import standard_tabular_pairs
from verifier.models import TabularCausalLM, load_model, load_tokenizer, resolve_dtype, shipped_checkpoint

MAX_SHIPPED_BYTES = 10 * 1024 * 1024  # issue 3: all shipped checkpoints together <= 10 MB


@pytest.fixture(scope="module")
def shipped():
    return {name: load_model(shipped_checkpoint(name)) for name in ("target", "draft")}


def test_shipped_checkpoints_are_safetensors_and_small():
    total = 0
    for name in ("target", "draft"):
        path = shipped_checkpoint(name)
        names = {p.name for p in path.iterdir()}
        assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
        assert not any(n.endswith((".bin", ".pt", ".pth")) for n in names)
        total += sum(p.stat().st_size for p in path.iterdir())
    assert total <= MAX_SHIPPED_BYTES


def test_shipped_pair_shares_vocab_and_eos_and_draft_is_smaller(shipped):
    target, draft = shipped["target"], shipped["draft"]
    assert target.config.vocab_size == draft.config.vocab_size
    tok = load_tokenizer(shipped_checkpoint("target"))
    assert tok.eos_token_id == target.config.eos_token_id == draft.config.eos_token_id
    assert len(tok) == target.config.vocab_size
    n_target = sum(p.numel() for p in target.parameters())
    n_draft = sum(p.numel() for p in draft.parameters())
    assert n_draft < n_target / 2


def test_shipped_tokenizer_round_trips_python_source():
    tok = load_tokenizer("shipped:target")
    text = "def f(x):\n    return x + 1\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    assert all(0 <= i < len(tok) for i in ids)


def test_shipped_models_emit_eos(shipped):
    """The EOS token must be reachable: after a closed code paragraph the target gives it real mass."""
    tok = load_tokenizer("shipped:target")
    ids = tok("import os\nimport sys", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        probs = torch.softmax(shipped["target"](input_ids=torch.tensor([ids])).logits[0, -1].double(), -1)
    assert probs[tok.eos_token_id] > 0.01


def test_train_report_matches_issue_ranges():
    report = json.loads((shipped_checkpoint("target").parent / "train_report.json").read_text())
    assert report["draft_heldout_loss"] > report["target_heldout_loss"]
    assert 0.5 <= report["overlap_T1"] <= 0.85


def test_load_model_missing_folder(tmp_path):
    with pytest.raises(ModelLoadError, match="not a folder"):
        load_model(tmp_path / "nope")


def test_load_model_without_safetensors(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"\0")
    with pytest.raises(ModelLoadError, match=r"no model\.safetensors.*pytorch_model\.bin"):
        load_model(tmp_path)


def test_load_model_without_config(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"\0")
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(tmp_path)


def test_load_model_malformed_weights(tmp_path):
    src = shipped_checkpoint("draft")
    (tmp_path / "config.json").write_text((src / "config.json").read_text())
    (tmp_path / "model.safetensors").write_bytes(b"this is not a safetensors file")
    with pytest.raises(ModelLoadError, match=str(tmp_path)):
        load_model(tmp_path)


def test_load_model_dtype_and_bad_dtype():
    model = load_model("shipped:draft", dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16
    with pytest.raises(InvalidArgumentError, match="dtype"):
        resolve_dtype("int8")
    with pytest.raises(InvalidArgumentError, match="name"):
        shipped_checkpoint("teacher")


def test_tabular_causal_lm_logits_are_the_table():
    pair = standard_tabular_pairs()["bigram4_eos"]
    lm = TabularCausalLM(pair.target)
    ids = torch.tensor([[0, 1, 2, 3]])
    probs = torch.softmax(lm(ids).logits[0], -1)
    for col, tok in enumerate(ids[0].tolist()):
        expected = [float(f) for f in pair.target.probs((tok,))]
        assert probs[col].tolist() == pytest.approx(expected, abs=1e-15)


def test_tabular_trigram_reads_only_visible_columns_and_cache():
    """A column with mask 0 is invisible: the trigram context skips it, as attention would."""
    pair = standard_tabular_pairs()["trigram3"]
    lm = TabularCausalLM(pair.target)
    first = lm(torch.tensor([[0, 1]]))
    # feed tokens 2 (hidden) and 0: the context of the last column must be (1, 0), not (2, 0)
    out = lm(torch.tensor([[2, 0]]), attention_mask=torch.tensor([[1, 1, 0, 1]]), cache=first.cache)
    got = torch.softmax(out.logits[0, -1], -1).tolist()
    assert got == pytest.approx([float(f) for f in pair.target.probs((1, 0))], abs=1e-15)
    assert got != pytest.approx([float(f) for f in pair.target.probs((2, 0))], abs=1e-3)
    assert out.cache.get_seq_length() == 4


def test_tabular_zero_entries_give_minus_inf():
    from verifier.exact import TabularLM

    lm = TabularCausalLM(TabularLM({(): [Fraction(1, 2), Fraction(1, 2), 0]}, 3, 0))
    assert lm(torch.tensor([[0]])).logits[0, 0, 2].item() == float("-inf")


def test_load_pair_refuses_an_eos_token_id_outside_the_vocabulary(tmp_path):
    """A checkpoint whose config names eos_token_id 99999 (vocab 384) is a clear ModelLoadError naming the value and
    the allowed range; it used to reach the planner and end the job with an IndexError (exit 3)."""
    import shutil

    from verifier.runner.models import load_pair
    from verifier.suite.schema import ModelPair

    ckpt = tmp_path / "target"
    shutil.copytree(shipped_checkpoint("target"), ckpt)
    for name in ("config.json", "generation_config.json"):
        path = ckpt / name
        if path.exists():
            cfg = json.loads(path.read_text())
            cfg["eos_token_id"] = 99999
            path.write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match=r"eos_token_id=99999.*\[0, 384\)"):
        load_pair(ModelPair(name="m", target=str(ckpt), draft=str(ckpt)))
