"""Plugin loading by ``module:factory``: clear errors, exit code 3 for crashes and invalid output,
and a decoder from a file outside the package audited as PASS (correct) and BIAS DETECTED (biased)."""

import sys

import pytest

from .plugin_sources import BAD_IMPORT_PLUGIN, BAD_KERNEL_PLUGIN, BROKEN_PLUGIN, TINY_SPEC_PLUGIN
from verifier.plugins import PluginLoadError, load_decoder, load_kernel, load_plugin
from verifier.errors import EXIT_DECODER, EXIT_USAGE, DecoderError, DecoderOutputError
from verifier.exact import step_law
from verifier.exact.tabular import TabularLM
from verifier.sampling import SamplingConfig
from verifier.stats import samples_needed

T1 = SamplingConfig()


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    (tmp_path / "tiny_spec_plugin.py").write_text(TINY_SPEC_PLUGIN)
    (tmp_path / "broken_plugin.py").write_text(BROKEN_PLUGIN)
    (tmp_path / "bad_import_plugin.py").write_text(BAD_IMPORT_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("tiny_spec_plugin", "broken_plugin", "bad_import_plugin"):
        sys.modules.pop(name, None)


def test_kernel_loaded_by_spec_is_the_function_or_built_by_its_factory():
    from verifier.decoders.kernels import verify_chain

    assert load_plugin("verifier.decoders.kernels:verify_chain", "kernel") is verify_chain
    hf = load_kernel("verifier.engines.hf_kernel:make_hf_kernel", assistant_ensemble_weight=0.5)
    assert hf.inner.assistant_ensemble_weight == 0.5


@pytest.mark.parametrize(
    "spec, kind, message",
    [
        ("no_colon_here", "decoder", "allowed: 'package.module:factory'"),
        ("module:", "decoder", "is invalid"),
        ("surely_missing_module_xyz:make", "decoder", "module 'surely_missing_module_xyz' not found"),
        ("broken_plugin:nope", "decoder", "'nope' not found in 'broken_plugin'"),
        ("broken_plugin:NOT_A_DECODER", "decoder", "allowed: a decoder factory"),
        ("broken_plugin:make", "kernel", "does not implement the VerificationKernel protocol"),
        ("verifier.decoders.kernels:verify_chain", "decoder", "looks like a VerificationKernel"),
    ],
)
def test_bad_specs_are_usage_errors_naming_the_problem(plugin_dir, spec, kind, message):
    with pytest.raises(PluginLoadError) as info:
        load_plugin(spec, kind)
    assert message in str(info.value) and info.value.exit_code == EXIT_USAGE


def test_file_path_spec_and_options_not_accepted(plugin_dir):
    dec = load_decoder(f"{plugin_dir / 'broken_plugin.py'}:make", mode="ok")
    assert dec.generate([0], 2, 3, T1, 0).shape == (2, 3)
    with pytest.raises(PluginLoadError, match="cannot be built from options"):
        load_decoder("broken_plugin:make", colour="red")
    with pytest.raises(PluginLoadError, match="does not exist"):
        load_decoder(f"{plugin_dir / 'missing.py'}:make")


@pytest.mark.parametrize(
    "spec, options, error, message",
    [
        ("broken_plugin:make", {"mode": "shape"}, DecoderOutputError, "returned shape=(4, 2)"),
        ("broken_plugin:make", {"mode": "dtype"}, DecoderOutputError, "dtype=float32"),
        ("broken_plugin:make", {"mode": "range"}, DecoderOutputError, "row 1: token id 9 at position 1 is outside 0..3"),
        ("broken_plugin:make", {"mode": "after_eos"}, DecoderOutputError, "row 2: token 1 at position 1 comes after EOS"),
        ("broken_plugin:make", {"mode": "raises"}, DecoderError, "RuntimeError: CUDA exploded"),
        ("broken_plugin:make_raises_in_factory", {}, DecoderError, "raised while being built: ValueError: bad weights path"),
        ("bad_import_plugin:make", {}, DecoderError, "raised while being imported: ImportError"),
    ],
)
def test_crashing_or_invalid_plugins_are_exit_code_3_with_the_first_bad_row(plugin_dir, spec, options, error, message):
    with pytest.raises(error) as info:
        load_decoder(spec, **options).generate([0], 4, 3, T1, 0)
    assert message in str(info.value) and info.value.exit_code == EXIT_DECODER


def test_kernel_plugin_inside_the_reference_decoder_is_validated(tmp_path):
    """A third-party kernel run in the reference decoding loop: invalid output is exit 3, first bad row shown."""
    from verifier.plugins import make_speculative_with_kernel
    from verifier.exact import standard_tabular_pairs
    from verifier.models.tabular import TabularCausalLM

    (tmp_path / "bad_kernel.py").write_text(BAD_KERNEL_PLUGIN)
    pair = standard_tabular_pairs()["bigram4_eos"]
    decoder = make_speculative_with_kernel(TabularCausalLM(pair.target), TabularCausalLM(pair.draft), 2,
                                           kernel=f"{tmp_path / 'bad_kernel.py'}:verify")
    with pytest.raises(DecoderOutputError, match=r"invalid output in row 1: token id 9 at position 0 is outside 0..3") as info:
        decoder.generate([0], 4, 3, T1, 0)
    assert info.value.exit_code == EXIT_DECODER


def test_cli_reports_invalid_plugin_output_as_exit_3(plugin_dir, capsys):
    from verifier.cli import main

    code = main(["audit", "--decoder", "broken_plugin:make", "--option", "mode=after_eos", "--vocab-size", "4",
                 "--eos-token-id", "3", "--blackbox-reference", "broken_plugin:make", "--prompt-ids", "0",
                 "--num-samples", "5", "--max-new-tokens", "3"])
    assert code == EXIT_DECODER
    assert "row 2: token 1 at position 1 comes after EOS" in capsys.readouterr().err


@pytest.mark.slow
def test_outside_plugin_correct_passes_and_biased_is_detected(plugin_dir):
    """Known-p audit of a third-party decoder loaded by ``module:factory`` from ``tmp_path``.

    Expected law from the exact enumerator: target p = (.2, .5, .3); the biased plugin's first
    token follows ``step_law(p, q, "full_p_fallback").output_law`` = (.26, .45, .29), TV .06.
    n = 2000 per prompt exceeds ``samples_needed`` at the Holm level alpha / (2 * 3 cells) and
    power .99 (1860), so the biased variant is missed with probability < .01; the correct one
    fails with probability <= alpha = 1e-3 (seed 11).
    """
    from verifier.api import check_preserves_target

    p, q = ["1/5", "1/2", "3/10"], ["1/2", "3/10", "1/5"]
    biased_law = [float(v) for v in step_law(p, q, "full_p_fallback").output_law]
    n, alpha = 2000, 1e-3
    assert n >= samples_needed([float(v) for v in [0.2, 0.5, 0.3]], biased_law, alpha=alpha / 6, power=0.99)
    target = TabularLM({(): p}, vocab_size=3, context_len=0, name="tiny-target")
    verdicts = {}
    for factory in ("make_correct", "make_biased"):
        decoder = load_decoder(f"tiny_spec_plugin:{factory}", num_draft_tokens=2)
        result = check_preserves_target(decoder, target, [[0]], T1, num_samples=n, max_new_tokens=3, alpha=alpha, seed=11)
        verdicts[factory] = result.verdict
    assert verdicts == {"make_correct": "PASS", "make_biased": "BIAS DETECTED"}


def test_audit_public_names_exist():
    import verifier.audit as audit

    assert len(set(audit.__all__)) == len(audit.__all__)
    for name in audit.__all__:
        assert hasattr(audit, name) and not name.startswith("_")
