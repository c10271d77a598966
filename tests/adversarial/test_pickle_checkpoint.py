"""Issue 12, part 3: a checkpoint whose safetensors index points at a ``.bin`` file was loaded
with ``torch.load`` (pickle).  The README promises safetensors only: it is a ModelLoadError (exit 2)."""

from __future__ import annotations

import json
import shutil

import pytest

from verifier.errors import ModelLoadError
from verifier.models import load_model, shipped_checkpoint


@pytest.mark.parametrize("weights", ["pytorch_model.bin", "../outside.safetensors"])
def test_index_pointing_outside_safetensors_is_refused(tmp_path, weights):
    import torch

    src = shipped_checkpoint("draft")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    shutil.copy(src / "config.json", ckpt / "config.json")
    state = load_model(src).state_dict()
    torch.save(state, ckpt / "pytorch_model.bin")  # loadable with torch.load
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: weights for k in state}}))
    with pytest.raises(ModelLoadError, match=r"safetensors only"):
        load_model(ckpt)
