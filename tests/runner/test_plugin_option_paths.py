"""A decoder option naming a plugin file (``inject_kernel = "kern.py:fn"``) is the file beside the suite,
never one in the working directory (which would run whatever file the cwd happens to hold)."""

from __future__ import annotations

import dataclasses
import textwrap

from verifier.runner.plan import build_decoder

PLUGIN = textwrap.dedent('''
    class Recorder:
        def __init__(self, options):
            self.options = options

        def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
            raise NotImplementedError


    def make(**options):
        return Recorder(options)
''')


@dataclasses.dataclass
class _Spec:
    decoder: str
    options: dict


class _Pair:
    target = draft = target_model = draft_model = None
    vocab_size, eos_token_id = 4, 3


def test_relative_plugin_file_options_resolve_against_the_suite_folder(tmp_path, monkeypatch):
    suite_dir = tmp_path / "suite"
    suite_dir.mkdir()
    (suite_dir / "plug.py").write_text(PLUGIN)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    spec = _Spec("plug.py:make", {"inject_kernel": "kern.py:fn", "module": "pkg.mod:fn", "text": "a:b", "k": 2})
    decoder = build_decoder(spec, _Pair(), 1, "decoders[x]", base_dir=str(suite_dir))
    assert decoder.options["inject_kernel"] == f"{suite_dir / 'kern.py'}:fn"
    assert decoder.options["module"] == "pkg.mod:fn"  # an importable module is not a path
    assert decoder.options["text"] == "a:b" and decoder.options["k"] == 2
