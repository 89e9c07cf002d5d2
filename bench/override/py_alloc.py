"""Allocation-heavy Python for bench/override_bench.py: the interpreter's own small objects
(dicts, lists, strings, JSON), as a tokenizer or an HTTP front end makes them, and large
buffers appended and dropped.

    python3 py_alloc.py objects N      N rounds of building, encoding and dropping records
    python3 py_alloc.py bytearrays N   N MiB appended as 8 MiB bytearrays, dropped every 64 MiB

Prints one line with a checksum of what it built, so every allocator's run did the same work.
"""

import json
import sys


def objects(rounds):
    checksum = 0
    for r in range(rounds):
        records = [
            {"id": i, "name": "token-%d-%d" % (r, i), "ids": list(range(i % 17)),
             "score": i * 0.5}
            for i in range(2000)
        ]
        text = json.dumps(records)
        back = json.loads(text)
        words = text.split(",")
        index = {w: n for n, w in enumerate(words[:5000])}
        checksum += len(back) + len(index) + sum(len(x["ids"]) for x in back)
    return checksum


def bytearrays(mib):
    checksum = 0
    held = []
    for i in range(0, mib, 8):
        block = bytearray(8 << 20)
        block[0] = i % 256
        held.append(block)
        if len(held) == 8:
            checksum += sum(b[0] for b in held)
            held = []
    return checksum


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("objects", "bytearrays"):
        sys.exit("usage: py_alloc.py objects|bytearrays N")
    n = int(sys.argv[2])
    print(sys.argv[1], "checksum=%d" % (objects(n) if sys.argv[1] == "objects" else bytearrays(n)))


main()
