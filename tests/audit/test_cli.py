"""``specverify audit`` modes and exit codes (0 pass, 1 bias, 2 usage)."""

import json

from verifier.cli import main
from verifier.errors import EXIT_BIAS, EXIT_OK, EXIT_USAGE


def test_kernel_mode_exit_codes(tmp_path, capsys):
    common = ["--num-draws", "20000", "--case", "seed-3token", "--seed", "2"]
    assert main(["audit", "--kernel", "verifier.decoders.kernels:verify_chain", *common]) == EXIT_OK
    out = tmp_path / "k.json"
    assert main(["audit", "--kernel", "verifier.decoders.kernels:full_p_fallback_kernel", "--json", str(out), *common]) == EXIT_BIAS
    assert json.loads(out.read_text())["results"][0]["verdict"] == "BIAS DETECTED"
    assert "draws/s" in capsys.readouterr().out


def test_blackbox_mode_against_plain_sampling_of_the_target(tmp_path):
    out = tmp_path / "b.json"
    code = main(["audit", "--decoder", "verifier.decoders.speculative:SpeculativeDecoder", "--target", "tabular:bigram4_eos",
                 "--blackbox", "--num-draft-tokens", "2", "--prompt-ids", "0", "--num-samples", "1500", "--max-new-tokens", "3",
                 "--seed", "6", "--json", str(out)])
    result = json.loads(out.read_text())
    assert code == EXIT_OK and result["mode"] == "blackbox" and len(result["cells"]) == 4


def test_usage_errors_exit_2(capsys):
    assert main(["audit", "--decoder", "verifier.decoders.speculative:SpeculativeDecoder", "--vocab-size", "4"]) == EXIT_USAGE
    assert "--target" in capsys.readouterr().err
    assert main(["audit", "--kernel", "verifier.decoders.kernels:verify_chain", "--case", "nope"]) == EXIT_USAGE
