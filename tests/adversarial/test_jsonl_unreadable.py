"""Sample files that are not UTF-8 or not gzip used to end `specverify audit --samples` in a traceback
(exit 1); they are malformed input: SampleFileError (exit 2) naming the file and line."""

from __future__ import annotations

import gzip

import pytest

from verifier.audit.jsonl import SampleFileError, import_jsonl
from verifier.cli import main
from verifier.errors import EXIT_USAGE

GOOD = b'{"prompt_id": "p0", "prompt_token_ids": [0, 1], "emitted_token_ids": [1, 2, 0]}\n'


@pytest.mark.parametrize("name, data, where", [
    ("latin1.jsonl", GOOD + b'{"prompt_id": "p\xff0", "emitted_token_ids": [1]}\n', "line 2"),
    ("plain.jsonl.gz", GOOD, "line 1"),  # named .gz, not gzip
    ("truncated.jsonl.gz", gzip.compress(GOOD * 50, mtime=0)[:40], "line 1"),
], ids=["latin1", "plain-named-gz", "truncated-gz"])  # fixed ids and mtime: xdist workers must collect the same names
def test_unreadable_sample_file_is_a_usage_error(tmp_path, capsys, name, data, where):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(SampleFileError, match=rf"{name} {where}: unreadable"):
        import_jsonl(path, vocab_size=3)
    assert main(["audit", "--samples", str(path), "--vocab-size", "3", "--max-new-tokens", "3"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "unreadable" in err and "Traceback" not in err
