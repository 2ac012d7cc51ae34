"""A child of the step that tries to take the model key from it, for tests.

Run as a command or as the repair workflow: it reads its parent's /proc/PID/environ, its
parent's memory through /proc/PID/mem, and the file named as its first argument, and looks in
each for a key of the tests' shape (`KEYMARK-` and 32 hex digits). It prints one JSON object,
`{where: [keys found] or "denied: ..."}`, and as a repair workflow also writes it as the
evidence of a succeeded outcome.
"""

import json
import os
import re
import sys

KEY_SHAPE = re.compile(rb"KEYMARK-[0-9a-f]{32}")
parent = os.getppid()


def environment() -> bytes:
    with open(f"/proc/{parent}/environ", "rb") as handle:
        return handle.read()


def memory() -> bytes:
    seen = []
    with open(f"/proc/{parent}/maps") as maps, open(f"/proc/{parent}/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("rw"):  # a key read at run time lies in writable memory
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(start)
                seen.append(mem.read(end - start))
            except (OSError, OverflowError, ValueError):
                continue
    return b"".join(seen)


def key_file() -> bytes:
    with open(sys.argv[1], "rb") as handle:
        return handle.read()


found: dict[str, object] = {}
for where, read in (("environ", environment), ("mem", memory), ("file", key_file)):
    try:
        found[where] = sorted({k.decode() for k in KEY_SHAPE.findall(read())})
    except OSError as exc:
        found[where] = f"denied: {exc.strerror}"
report = json.dumps(found, sort_keys=True)
print(report)
if "GOALKEEPER_REPAIR_OUTCOME" in os.environ:
    with open(os.environ["GOALKEEPER_REPAIR_OUTCOME"], "w", encoding="utf-8") as outcome:
        json.dump({"outcome": "succeeded", "evidence": report, "changed": []}, outcome)
