"""Build the audited copies of llama.cpp's examples/speculative/speculative.cpp.

Usage: python ci/engines/llama_cpp/variants.py INSTALL_DIR [--compile-only]

(``--compile-only`` compiles the copies, which needs only the headers, e.g. while the libraries still build.)

``llama-speculative`` prints the emitted *text*; an audit needs token ids.  This script writes copies
of ``src/vendor/llama.cpp/examples/speculative/speculative.cpp`` under ``INSTALL_DIR/variants/`` and
compiles each with the exact compile command CMake used for the original (``build/compile_commands.json``)
and links it against the same shared libraries (``build/bin``).  The original file is never edited.

Variants (binaries in ``INSTALL_DIR/bin/``):

``llama-speculative-ids``
    The original plus two lines, each one ``fprintf(stderr, ...)`` call (one write, so the log
    thread cannot split it), that print the prompt ids the binary tokenized and each emitted token
    id with its accept flag (next to ``++n_predict``).  The
    sampling algorithm is untouched.  This is the binary the ``llama.cpp`` adapter audits.
``llama-speculative-ids-ctl-draft``
    CONTROL: the ids copy with only the draft-token defect patched: the draft token is the one the
    draft sampler sampled (``cur_p->data[cur_p->selected]``) instead of the most probable candidate
    (``cur_p->data[0]`` after sorting).
``llama-speculative-ids-ctl-residual``
    CONTROL: the ids copy with only the residual defect patched: the residual
    ``max(0, p - q)`` subtracts the draft prob *of the same token id* instead of the draft
    candidate at the same array index (the two candidate arrays differ once top-k/top-p cut them).
``llama-speculative-ids-ctl-both``
    Both patches.

Each edit replaces one anchor that must occur exactly once in the original (else this script fails,
so a changed upstream file cannot be patched silently).  Writes ``INSTALL_DIR/variants.json``
(per variant: source path, sha256 of source and binary, the edits).
"""
import hashlib
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

IDS_EDITS = [
    ("    const int n_input = inp.size();\n",
     "    const int n_input = inp.size();\n"
     '    { std::string ids; for (auto id : inp) { ids += " " + std::to_string(id); } fprintf(stderr, "[specverify] prompt%s\\n", ids.c_str()); }\n'),
    ("                ++n_predict;\n",
     '                fprintf(stderr, "[specverify] token %d %d\\n", token_id, (int) accept);\n'
     "                ++n_predict;\n"),
]
DRAFT_EDIT = ("                    const llama_token id = cur_p->data[is].id;\n",
              "                    const llama_token id = is == 0 ? cur_p->data[cur_p->selected].id : cur_p->data[is].id; // specverify control: the sampled draft token\n")
RESIDUAL_EDIT = (
    "                                if (i < dist_dft.size) {\n"
    "                                    dist_tgt.data[i].p = std::max(0.0f, dist_tgt.data[i].p - dist_dft.data[i].p);\n",
    "                                // specverify control: subtract the draft prob of the same token id (dist_dft is sorted by id)\n"
    "                                const auto * q_it = std::lower_bound(dist_dft.data, dist_dft.data + dist_dft.size, dist_tgt.data[i].id,\n"
    "                                        [](const llama_token_data & a, llama_token b) { return a.id < b; });\n"
    "                                const bool q_found = q_it != dist_dft.data + dist_dft.size && q_it->id == dist_tgt.data[i].id;\n"
    "                                if (q_found) {\n"
    "                                    dist_tgt.data[i].p = std::max(0.0f, dist_tgt.data[i].p - q_it->p);\n",
)
VARIANTS = {
    "llama-speculative-ids": IDS_EDITS,
    "llama-speculative-ids-ctl-draft": IDS_EDITS + [DRAFT_EDIT],
    "llama-speculative-ids-ctl-residual": IDS_EDITS + [RESIDUAL_EDIT],
    "llama-speculative-ids-ctl-both": IDS_EDITS + [DRAFT_EDIT, RESIDUAL_EDIT],
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def apply(text: str, edits) -> str:
    for old, new in edits:
        if text.count(old) != 1:
            sys.exit(f"variants.py: anchor found {text.count(old)} times (need exactly 1): {old!r}")
        text = text.replace(old, new)
    return text


def main() -> None:
    dest = Path(sys.argv[1]).resolve()
    compile_only = "--compile-only" in sys.argv[2:]
    original = dest / "src/vendor/llama.cpp/examples/speculative/speculative.cpp"
    build = dest / "build"
    entry = next(e for e in json.loads((build / "compile_commands.json").read_text())
                 if Path(e["file"]).resolve() == original.resolve())
    compile_args = shlex.split(entry["command"])
    ninja = (build / "build.ninja").read_text()
    link = re.search(r"build bin/llama-speculative: .*?\n  FLAGS = (.*?)\n  LINK_LIBRARIES = (.*?)\n", ninja, re.S)
    if link is None:
        sys.exit("variants.py: no link rule for bin/llama-speculative in build/build.ninja")
    (dest / "variants").mkdir(exist_ok=True)
    (dest / "bin").mkdir(exist_ok=True)
    record = {"original": {"path": str(original.relative_to(dest)), "sha256": sha256(original)}, "variants": {}}
    for name, edits in VARIANTS.items():
        source = dest / "variants" / f"{name}.cpp"
        source.write_text(apply(original.read_text(), edits))
        obj = dest / "variants" / f"{name}.o"
        args = [str(source) if a == entry["file"] else str(obj) if a.endswith("speculative.cpp.o") else a for a in compile_args]
        stamp = obj.with_suffix(".sha256")
        if not obj.is_file() or not stamp.is_file() or stamp.read_text() != sha256(source):  # compile once per source
            subprocess.run(args, cwd=entry["directory"], check=True)
            stamp.write_text(sha256(source))
        if compile_only:
            continue
        binary = dest / "bin" / name
        subprocess.run([compile_args[0], *shlex.split(link.group(1)), str(obj), "-o", str(binary), *shlex.split(link.group(2))],
                       cwd=build, check=True)
        record["variants"][name] = {"source": str(source.relative_to(dest)), "sha256": sha256(source),
                                    "binary_sha256": sha256(binary), "edits": len(edits)}
        print(f"variants.py: built bin/{name}")
    if compile_only:
        return
    (dest / "variants.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
