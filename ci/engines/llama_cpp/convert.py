"""Convert a Hugging Face checkpoint to an f32 GGUF with llama.cpp's own converter, unmodified.

Usage: python ci/engines/llama_cpp/convert.py LLAMA_CPP_DIR HF_DIR OUT.gguf

``LLAMA_CPP_DIR/convert_hf_to_gguf.py`` refuses BPE tokenizers whose pre-tokenizer hash it does
not list ("BPE pre-tokenizer was not recognized"), which includes the shipped ByteLevel BPE
tokenizer.  This wrapper imports the converter as a module and wraps
``conversion.base.TextModel.get_vocab_base_pre``: the converter's own answer where it has one,
``"gpt-2"`` (llama.cpp's ByteLevel pre-tokenizer) only where it raises NotImplementedError.  No
file of the engine is edited.  The adapter checks the tokenization round trip of every prompt
(the binary prints the ids it tokenized), so a pre-tokenizer mismatch cannot go unnoticed.
"""
import importlib.util
import sys
import types
from pathlib import Path

FALLBACK_PRE_TOKENIZER = "gpt-2"  # llama.cpp's name for the GPT-2 ByteLevel split regex

llama_dir, hf_dir, out = (Path(a).resolve() for a in sys.argv[1:4])
sys.path.insert(0, str(llama_dir))
import convert_hf_to_gguf  # noqa: E402  (puts gguf-py on sys.path itself)
from conversion import base  # noqa: E402

_original = base.TextModel.get_vocab_base_pre


def get_vocab_base_pre(self, tokenizer) -> str:
    try:
        return _original(self, tokenizer)
    except NotImplementedError:
        print(f"convert.py: pre-tokenizer not recognized by the converter; using {FALLBACK_PRE_TOKENIZER!r}", file=sys.stderr)
        return FALLBACK_PRE_TOKENIZER


base.TextModel.get_vocab_base_pre = get_vocab_base_pre

if importlib.util.find_spec("sentencepiece") is None:
    # LlamaModel.set_vocab tries SentencePiece first and imports the package *before* it looks for
    # tokenizer.model (whose absence sends it on to the BPE path).  A checkpoint without
    # tokenizer.model never calls into the package; one with it gets this error instead.
    stub = types.ModuleType("sentencepiece")

    class SentencePieceProcessor:  # noqa: D101
        def __init__(self, *args, **kwargs):
            raise ImportError("this checkpoint has tokenizer.model: pip install sentencepiece to convert it")

    stub.SentencePieceProcessor = SentencePieceProcessor
    sys.modules["sentencepiece"] = stub
sys.argv = ["convert_hf_to_gguf.py", str(hf_dir), "--outfile", str(out), "--outtype", "f32"]
convert_hf_to_gguf.main()
