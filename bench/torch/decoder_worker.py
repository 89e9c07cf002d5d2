#!/usr/bin/env python3
"""One configuration's process for bench/pytorch_decoder_bench.py. Builds the example decoder
(examples/pytorch_decoder.py: the same arguments, the same placement), then serves the batch
each time the driver writes "serve" on stdin, and answers each with one JSON line (ttft_s,
tpot_s); "exit" answers with the process's peak RSS (peak_rss_kib) and ends it. "ready" on
stdout says the model is built. Each serve gets a fresh paged KV cache (a new numarena.KvPool,
closed after it), as examples/pytorch_decoder.py's main() does once.

The driver keeps every configuration's worker alive and lets one serve at a time, so that
consecutive serves of different configurations are a fraction of a second apart (see the
driver's docstring for why).
"""
import json
import os
import resource
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))

import torch  # noqa: E402

import pytorch_decoder as decoder  # noqa: E402


def main():
    args = decoder.parse_args(sys.argv[1:])
    model, prompts, _ = decoder.build(args)
    print("ready", flush=True)
    with torch.inference_mode():
        for line in sys.stdin:
            command = line.strip()
            if command == "exit":
                break
            if command != "serve":
                sys.exit(f"decoder_worker: unknown command {command!r} (serve or exit)")
            cache = decoder.PagedCache(model, args)
            _, ttft, tpot = decoder.serve(model, cache, prompts, args.generate)
            cache.pool.close()
            print(json.dumps({"ttft_s": ttft, "tpot_s": tpot}), flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_rss_kib": peak}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
