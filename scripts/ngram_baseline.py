#!/usr/bin/env python3
"""Add-k byte n-gram baselines (n = 1..4) on the fortune corpus: held-out cross-entropy in bits per byte.

Standard library only, and no tessera code: it reads the fortune files and splits them into documents
and into training and held-out parts exactly as tessera::data::text_corpus and token_windows do, so a
transformer trained on token_windows can be compared with these numbers.

Documents (text_corpus.hpp): the files of a directory are its direct entries that are regular files,
in the byte order of their names, except names starting with '.', ending in .dat or .u8, and files
holding a NUL byte. A file is split into lines at '\\n', one '\\r' ending a line is dropped, a line
holding only '%' ends an entry (the file's end ends the last one); an entry is its lines joined by
'\\n', right-stripped of ASCII whitespace, plus one '\\n'; entries empty once stripped are dropped.

Split (token_windows.hpp): document i is held out iff splitmix64(seed ^ i) % 100 < held_out_percent,
splitmix64(x) being the first output of the splitmix64 generator seeded with x.

Model: for each n, p(b | c) = (count(c b) + k) / (count(c) + 256 k) over the previous n - 1 bytes c
of the part's concatenated documents (the stream is preceded by n - 1 '\\n' bytes, so every byte is
predicted, the first ones from that padding). k is tuned per n on the "tuning slice": the training
documents with splitmix64(seed ^ i) % 100 >= 90 (10 % of the documents, disjoint from the held-out
ones while held_out_percent <= 90), with the model counted on the other training documents; the
model with the best k is then counted on the whole training part and scored on the held-out part.

Usage: scripts/ngram_baseline.py [PATH] [--seed S] [--held-out-percent P] [--counts]
  --counts  prints only "documents D bytes B held_out_documents H held_out_bytes HB" (what
            tests/data/test_text.cpp compares with text_corpus and token_windows).
"""
import argparse
import math
import os
import sys
from collections import Counter

MASK = (1 << 64) - 1
WHITESPACE = b" \t\n\r\x0b\x0c"
K_GRID = [10.0 ** (e / 4.0) for e in range(-24, 5)]  # 1e-6 .. 10, four per decade
TUNING_PERCENT = 90  # training documents with hash % 100 >= this form the tuning slice


def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def documents_of_bytes(data):
    docs, lines = [], []

    def end_entry():
        entry = b"\n".join(lines).rstrip(WHITESPACE)
        if entry:
            docs.append(entry + b"\n")
        lines.clear()

    for line in data.split(b"\n"):
        if line.endswith(b"\r"):
            line = line[:-1]
        if line == b"%":
            end_entry()
        else:
            lines.append(line)
    end_entry()
    return docs


def read_corpus(path):
    """The documents of a fortune file or a directory of them, in text_corpus's order."""
    bpath = os.fsencode(path)
    if os.path.isdir(bpath):
        names = sorted(os.listdir(bpath))
        files = []
        for name in names:
            full = os.path.join(bpath, name)
            if name.startswith(b".") or name.endswith(b".dat") or name.endswith(b".u8") or not os.path.isfile(full):
                continue
            files.append(full)
    elif os.path.exists(bpath):
        files = [bpath]
    else:
        sys.exit(f"ngram_baseline.py: {path}: no such file or directory")
    docs = []
    for f in files:
        with open(f, "rb") as handle:
            data = handle.read()
        if b"\0" in data:
            continue
        docs.extend(documents_of_bytes(data))
    if not docs:
        sys.exit(f"ngram_baseline.py: {path}: no document")
    return docs


def counts(stream, n):
    """count(c b) and count(c) over the stream, which starts with n - 1 padding bytes."""
    grams = Counter(stream[i:i + n] for i in range(len(stream) - n + 1))
    contexts = Counter()
    for g, c in grams.items():
        contexts[g[:-1]] += c
    return grams, contexts


def padded(docs, n):
    return b"\n" * (n - 1) + b"".join(docs)


def scored(model, docs, n):
    """(count(c b), count(c)) of every byte of the docs' stream under a model, for any k."""
    grams, contexts = model
    stream = padded(docs, n)
    return [(grams.get(stream[i:i + n], 0), contexts.get(stream[i:i + n - 1], 0)) for i in range(len(stream) - n + 1)]


def bits_per_byte(pairs, k):
    pairs_counted = Counter(pairs)  # many positions share their counts: log once per distinct pair
    total = 0.0
    for (g, c), times in pairs_counted.items():
        total -= times * math.log2((g + k) / (c + 256.0 * k))
    return total / len(pairs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default="/usr/share/games/fortunes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--held-out-percent", type=int, default=10)
    parser.add_argument("--counts", action="store_true")
    parser.add_argument("--max-n", type=int, default=4)
    args = parser.parse_args()
    if not 0 <= args.held_out_percent <= 100:
        sys.exit(f"ngram_baseline.py: held-out percent {args.held_out_percent} is not in [0, 100]")

    docs = read_corpus(args.path)
    hashes = [splitmix64((args.seed ^ i) & MASK) % 100 for i in range(len(docs))]
    held = [d for d, h in zip(docs, hashes) if h < args.held_out_percent]
    train = [d for d, h in zip(docs, hashes) if h >= args.held_out_percent]
    if args.counts:
        print(f"documents {len(docs)} bytes {sum(map(len, docs))} "
              f"held_out_documents {len(held)} held_out_bytes {sum(map(len, held))}")
        return
    if args.held_out_percent > TUNING_PERCENT:
        sys.exit(f"ngram_baseline.py: held-out percent {args.held_out_percent} leaves no tuning slice (need <= {TUNING_PERCENT})")
    fit = [d for d, h in zip(docs, hashes) if args.held_out_percent <= h < TUNING_PERCENT]
    tune = [d for d, h in zip(docs, hashes) if h >= TUNING_PERCENT]
    if not held or not tune or not fit:
        sys.exit("ngram_baseline.py: a part is empty (held-out, tuning or fitting documents)")
    print(f"corpus {args.path}: {len(docs)} documents, {sum(map(len, docs))} bytes; seed {args.seed}, "
          f"{args.held_out_percent} % held out")
    print(f"training {len(train)} documents, {sum(map(len, train))} bytes "
          f"(k tuned on {len(tune)} of them, {sum(map(len, tune))} bytes, hash % 100 >= {TUNING_PERCENT}); "
          f"held out {len(held)} documents, {sum(map(len, held))} bytes")
    results = []
    for n in range(1, args.max_n + 1):
        pairs = scored(counts(padded(fit, n), n), tune, n)
        k, tuned = min(((k, bits_per_byte(pairs, k)) for k in K_GRID), key=lambda kv: kv[1])
        held_bpb = bits_per_byte(scored(counts(padded(train, n), n), held, n), k)
        results.append((held_bpb, n, k))
        print(f"n={n}  k={k:.4g}  tuning slice {tuned:.4f} bits/byte  held-out {held_bpb:.4f} bits/byte")
    best = min(results)
    print(f"best: n={best[1]} (k={best[2]:.4g}): {best[0]:.4f} bits per byte on the held-out part")


if __name__ == "__main__":
    main()
