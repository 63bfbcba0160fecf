"""The Python SDK's side of tests/cluster/cluster_prefix_test.cc: one prompt's put_prefix or
lookup_prefix through a kvdepot.Client (cluster_routing "auto", G from its view), answered as one
JSON line. Prompts and chunk values are those of the C++ tests (tests/client/prefix_prompts.h:
PromptTokens, PromptChunkValue)."""
import argparse
import json

import kvdepot


def prompt_tokens(seed, count):
    return [(seed * 104729 + i) % (1 << 32) for i in range(count)]


def chunk_value(i):
    return bytes((i * 7 + j) & 0xFF for j in range(1024 + 3 * i))


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("op", choices=["put", "lookup"])
    p.add_argument("--address", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--chunks", type=int, required=True)
    p.add_argument("--chunk-tokens", type=int, required=True)
    a = p.parse_args()
    client = kvdepot.Client(a.address, timeout_ms=5000)
    ns = kvdepot.Namespace(a.model, chunk_tokens=a.chunk_tokens)
    tokens = prompt_tokens(a.seed, a.chunks * a.chunk_tokens)
    if a.op == "put":
        client.put_prefix(ns, tokens, [chunk_value(i) for i in range(a.chunks)])
        print(json.dumps({"stored": a.chunks}))
    else:
        prefix_length, keys, _ = client.lookup_prefix(ns, tokens)
        print(json.dumps({"prefix_length": prefix_length, "chunks": len(keys)}))


if __name__ == "__main__":
    main()
