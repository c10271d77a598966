"""The ready-to-copy CI templates under ci/: valid YAML, the right triggers and runners, artifacts
uploaded even on failure, and every `specverify` / `torchrun` command they run parses with the
real command-line parsers (and names a suite this repository ships)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="pyyaml is in the dev extra: pip install -e '.[dev]'")

from verifier.cli import build_parser  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GITHUB = ROOT / "ci" / "github" / "specverify.yml"
GITLAB = ROOT / "ci" / "gitlab" / "specverify.gitlab-ci.yml"
ARTIFACTS = ("report.html", "junit.xml")
LAUNCHER = "verifier.cli.torchrun"


def _load(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict), f"{path} is not a YAML mapping"
    return doc


def _expand(text: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\{?([A-Z_][A-Z0-9_]*)\}?", lambda m: env.get(m.group(1), m.group(0)), text)


def _commands(script: str, env: dict[str, str]) -> list[list[str]]:
    """`specverify ...` and `torchrun ...` lines of a script, variables expanded, as argv lists."""
    out = []
    for line in script.splitlines():
        line = line.strip()
        if line.startswith(("specverify ", "torchrun ")):
            out.append(shlex.split(_expand(line, env)))
    return out


def _check(argv: list[str]) -> dict[str, str]:
    """Parse one command with the real parsers; return its run options (profile, output folder)."""
    if argv[0] == "torchrun":
        from torch.distributed.run import get_args_parser

        outer = get_args_parser().parse_args(argv[1:])
        assert outer.module and outer.training_script == LAUNCHER, argv
        from verifier.cli.torchrun import build_parser as launcher_parser

        inner = outer.training_script_args
        args = _parse(launcher_parser(), inner)
        suite, out = args.suite, args.run_dir
    else:
        inner = argv[1:]
        args = _parse(build_parser(), inner)
        assert getattr(args, "_run", None) is not None, argv
        suite, out = args.suite, args.report_dir
    assert (ROOT / suite).is_file(), f"the template runs {suite}, which this repository does not ship"
    return {"profile": args.profile, "out": out}


def _parse(parser, argv):
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:  # argparse prints the reason to stderr
        pytest.fail(f"`{' '.join(argv)}` does not parse (exit {exc.code})")


def test_github_workflow_gate_and_nightly():
    doc = _load(GITHUB)
    triggers = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert {"pull_request", "schedule"} <= set(triggers), triggers
    env = {k: str(v) for k, v in doc["env"].items()}
    jobs = doc["jobs"]
    gate, nightly = jobs["cpu-gate"], jobs["gpu-nightly"]
    assert "pull_request" in gate["if"] and "ubuntu" in gate["runs-on"]
    assert "schedule" in nightly["if"] and {"self-hosted", "gpu"} <= set(nightly["runs-on"])
    profiles = {}
    for name, job in jobs.items():
        commands = [c for step in job["steps"] for c in _commands(step.get("run", ""), env)]
        assert len(commands) == 1, f"job {name} must run exactly one verification command"
        opts = _check(commands[0])
        profiles[name] = opts["profile"]
        uploads = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
        assert len(uploads) == 1, f"job {name} must upload its reports once"
        assert uploads[0]["if"] == "always()", "reports must be uploaded when the gate fails too"
        for artifact in ARTIFACTS:
            assert any(line.strip().startswith(opts["out"]) and line.strip().endswith(artifact)
                       for line in uploads[0]["with"]["path"].splitlines()), f"job {name} does not upload {artifact}"
    assert profiles == {"cpu-gate": "ci", "gpu-nightly": "nightly"}
    assert _commands(nightly["steps"][-2]["run"], env)[0][0] == "torchrun"  # nightly is sharded over the GPUs


def test_gitlab_snippet_gate_and_nightly():
    doc = _load(GITLAB)
    env = {k: str(v) for k, v in doc["variables"].items()}
    gate, nightly = doc["specverify:cpu-gate"], doc["specverify:gpu-nightly"]
    assert any("merge_request_event" in r["if"] for r in gate["rules"])
    assert any("schedule" in r["if"] for r in nightly["rules"]) and "gpu" in nightly["tags"]
    for name, job, profile in (("cpu-gate", gate, "ci"), ("gpu-nightly", nightly, "nightly")):
        assert job["stage"] in doc["stages"]
        commands = [c for line in job["script"] for c in _commands(line, env)]
        assert len(commands) == 1, f"{name} must run exactly one verification command"
        opts = _check(commands[0])
        assert opts["profile"] == profile
        art = job["artifacts"]
        assert art["when"] == "always", "reports must be kept when the gate fails too"
        for artifact in ARTIFACTS:
            assert any(p.startswith(opts["out"]) and p.endswith(artifact) for p in art["paths"]), f"{name} does not keep {artifact}"
        assert art["reports"]["junit"].startswith(opts["out"]) and art["reports"]["junit"].endswith("junit.xml")


@pytest.mark.parametrize("argv", [
    ["specverify", "run", "suites/ci.toml", "--no-such-option"],
    ["torchrun", "--standalone", "-m", LAUNCHER, "suites/nightly.toml"],  # --run-dir is required
    ["torchrun", "--standalone", "-m", "some.other.module", "suites/nightly.toml", "--run-dir", "x"],
])
def test_checker_sees_a_broken_command(argv):
    """The checker itself must fail on a command the parsers reject."""
    with pytest.raises((pytest.fail.Exception, AssertionError)):
        _check(argv)


SLURM = ROOT / "ci" / "slurm" / "specverify-array.sbatch"


@pytest.mark.parametrize("array_env", [
    {"SLURM_ARRAY_TASK_COUNT": "8", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "7"},  # the array job
    # task 3 resubmitted alone (`sbatch --array=3`, as the script's header advises): an array of one task; with
    # `--shard env` it was shard 0 of 1 -- the whole suite in a folder of shards of 8 (break-it finding)
    {"SLURM_ARRAY_TASK_COUNT": "1", "SLURM_ARRAY_TASK_MIN": "3", "SLURM_ARRAY_TASK_MAX": "3"}])
def test_slurm_array_script_runs_one_shard_per_task(array_env):
    text = SLURM.read_text()
    array = re.search(r"^#SBATCH --array=0-(\d+)$", text, re.M)
    assert array, "the script must declare its array range"
    shards = re.search(r"^SPECVERIFY_SHARDS=\$\{SPECVERIFY_SHARDS:-(\d+)\}$", text, re.M)
    assert shards and int(shards.group(1)) == int(array.group(1)) + 1, "the shard count must be the array's size"
    env = {"SUITE": "suites/nightly.toml", "SPECVERIFY_SEED": "0", "SPECVERIFY_SHARDS": shards.group(1),
           "SLURM_ARRAY_TASK_ID": "3", **array_env}
    body = re.sub(r"\$\{(\w+):-[^}]*\}", r"$\1", text)  # ${VAR:-default} -> $VAR
    commands = _commands(body, env)
    assert len(commands) == 1
    args = _parse(build_parser(), commands[0][1:])
    assert args.profile == "nightly"
    from verifier.runner.shard import ShardSpec, parse_shard

    with __import__("unittest.mock").mock.patch.dict("os.environ", env, clear=True):
        assert parse_shard(args.shard) == ShardSpec(3, 8)
    assert (ROOT / args.suite).is_file()
    merge = re.search(r'--wrap "(specverify merge [^"]+)"', text).group(1)
    assert _parse(build_parser(), shlex.split(merge)[1:]).run_dirs == [args.run_dir]
