"""Issue 28 item 4: writing a plugin.

Before: a plugin file importing a sibling module was "decoder crashed" (exit 3, the message three
times); a factory argument named ``k`` got "it looks like a VerificationKernel" and no list of the
argument names the harness offers; every load error left a half-made run folder; "ENGINE REPORTS NO
STATISTICS" did not say how to report them; the report called the decoder ``decoder``.

Every test failed before its fix.  Real plugin files, the real CLI entry (``main``), tiny n.
"""

from __future__ import annotations

import textwrap

from verifier.cli import main
from verifier.errors import EXIT_USAGE

SIBLING = '''
import numpy as np

def draw(seed, num_samples, max_new_tokens):
    return np.random.default_rng(seed).integers(0, 3, size=(num_samples, max_new_tokens)).astype(np.int64)
'''

PLUGIN = '''
from {helper} import draw

class Uniform:
    name = "my-uniform"
    vocab_size = 3
    eos_token_id = None

    def __init__(self, num_draft_tokens):
        self.k = num_draft_tokens

    def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
        return draw(seed, num_samples, max_new_tokens)


def make(target, draft, k, temperature=1.0):
    return Uniform(k)
'''

AUDIT = ["--target", "tabular:trigram3", "--prompt-ids", "0,1", "--num-samples", "60", "--max-new-tokens", "2",
         "--no-progress"]


def _plugin(tmp_path, helper="plugin_helper_28"):
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / f"{helper}.py").write_text(SIBLING)
    (folder / "plugin.py").write_text(PLUGIN.format(helper=helper))
    return folder / "plugin.py"


def test_a_plugin_imports_its_sibling_module_and_is_named_by_its_name(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the plugin's folder: only the loader can make the sibling importable
    plugin = _plugin(tmp_path)
    code = main(["audit", "--decoder", f"{plugin}:Uniform", "--report-dir", str(tmp_path / "r"), *AUDIT])
    out = capsys.readouterr()
    assert "No module named" not in out.out + out.err and code in (0, 1, 4), out.out + out.err
    assert "my-uniform" in out.out
    md = next((tmp_path / "r").rglob("report.md")).read_text()
    assert "**my-uniform**" in md and "**decoder**" not in md
    # the report says how to report statistics, naming the DecoderStats fields
    assert "ENGINE REPORTS NO STATISTICS" in out.out
    assert "first_round_accepted" in out.out and "accepted_counts" in out.out and "DecoderStats" in out.out


def test_a_missing_dependency_is_one_load_error(tmp_path, capsys):
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "plugin.py").write_text("import not_installed_dependency_28\n")
    code = main(["audit", "--decoder", f"{folder / 'plugin.py'}:make", "--report-dir", str(tmp_path / "r"), *AUDIT])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert err.count("not_installed_dependency_28") == 1 and "plugin's folder" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()  # no half-made run folder


def test_a_factory_argument_k_lists_the_offered_names_and_leaves_no_run_folder(tmp_path, capsys):
    plugin = _plugin(tmp_path)
    code = main(["audit", "--decoder", f"{plugin}:make", "--report-dir", str(tmp_path / "r"), *AUDIT])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert "VerificationKernel" not in err
    assert "'num_draft_tokens'" in err and "'target'" in err and "'vocab_size'" in err and "['k']" in err
    assert "num_draft_tokens`, not `k`" in err
    assert not (tmp_path / "r").exists()


def test_a_suite_run_with_a_load_error_leaves_no_run_folder_but_keeps_an_existing_one(tmp_path, capsys):
    plugin = _plugin(tmp_path)
    suite = tmp_path / "s.toml"
    suite.write_text(textwrap.dedent(f'''
        schema_version = 1
        name = "plug"
        [exact]
        enabled = false
        [models.tri]
        target = "tabular:trigram3"
        draft = "tabular:trigram3"
        [prompts.p]
        ids = [0, 1]
        [sampling.t1]
        temperature = 1.0
        [defaults]
        max_new_tokens = 2
        samples = 20
        tests = ["gof"]
        [[decoders]]
        name = "mine"
        decoder = "{plugin}:make"
        '''))
    assert main(["run", str(suite), "--report-dir", str(tmp_path / "new"), "--no-progress"]) == EXIT_USAGE
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    assert main(["run", str(suite), "--run-dir", str(kept / "run"), "--no-progress"]) == EXIT_USAGE
    assert kept.is_dir() and not (kept / "run").exists()  # the folder it made is gone, the user's stays


def test_a_plugin_that_raises_while_imported_is_one_message_not_three(tmp_path, capsys):
    """A crash at import stays a decoder error (exit 3, with the plugin's traceback), said once: it was
    printed as 'not sampled: ...', as the verdict's reason and where the decoder stopped."""
    from verifier.errors import EXIT_DECODER

    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "plugin.py").write_text('raise RuntimeError("GPU library exploded at import")\n')
    code = main(["audit", "--decoder", f"{folder / 'plugin.py'}:make", "--report-dir", str(tmp_path / "r"), *AUDIT])
    out = capsys.readouterr().out
    assert code == EXIT_DECODER, out
    assert out.count("raised while being imported") == 1, out
