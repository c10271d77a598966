"""Client CPU of a URL audit against a bare client sending the same requests (reports/benchmarks.md section 13).

    python ci/url-audits/client_cost.py URL [--label NAME] [--seed S] [-n 1500]

URL: a running llama-server on the shipped pair (``launch_llama_server(..., draft_max=3, parallel=4)``).  Sends n
requests (k = 3, T = 1, 5 tokens each, 4 in flight) through ``post_all`` with the replies dropped, then through
``ServerDecoder.generate`` in chunks of 500 with the response journal on; prints each path's rate and its client CPU
per request (user + system of this process: the server is another process).  Run the two checkouts to compare
interleaved, on a quiet machine where you can.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def main() -> None:
    from verifier.bench.server import server_throughput
    from verifier.sampling import SamplingConfig
    from verifier.server.decoder import ServerDecoder

    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--label", default="")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("-n", type=int, default=1500)
    args = parser.parse_args()
    chunk, k = 500, 3
    prompt, sampling = [68, 69, 70, 221], SamplingConfig(temperature=1.0)

    def cpu() -> float:
        t = os.times()
        return t.user + t.system

    c0, t0 = cpu(), time.perf_counter()
    server_throughput(args.url, "llama-server", prompt, sampling, k + 2, args.n, 4, seed=args.seed)
    bare_wall, bare_cpu = time.perf_counter() - t0, cpu() - c0
    with tempfile.TemporaryDirectory() as tmp:
        dec = ServerDecoder(args.url, vocab_size=384, eos_token_id=0, num_draft_tokens=k, api="llama-server")
        dec.bind_run_dir(tmp)
        c0, t0 = cpu(), time.perf_counter()
        for c in range(args.n // chunk):
            dec.generate(prompt, chunk, k + 2, sampling, args.seed * 100 + c)
        dec_wall, dec_cpu = time.perf_counter() - t0, cpu() - c0
        dec.close()
    n = args.n // chunk * chunk
    print(f"{args.label} load {os.getloadavg()[0]:.1f}: bare {args.n / bare_wall:.0f}/s, client CPU "
          f"{bare_cpu / args.n * 1e3:.2f} ms/request | audit decoder {n / dec_wall:.0f}/s, client CPU "
          f"{dec_cpu / n * 1e3:.2f} ms/request")


if __name__ == "__main__":
    main()
