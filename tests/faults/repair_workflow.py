"""The fault suite's repair workflow (GOALKEEPER_REPAIR_COMMAND): it appends one line per
run, naming the monitor and check, to the log given as its argument, then reports success.
Two lines for one monitor and check would be a repair run twice."""

import json
import os
import re
import sys

with open(os.environ["GOALKEEPER_REPAIR_REQUEST"], encoding="utf-8") as handed:
    request = json.load(handed)
found = re.search(r"Monitor (\S+) of the fault suite", request["task"])
line = json.dumps({"monitor": found.group(1) if found else "?", "check": request["check"]})
# One O_APPEND write per run: concurrent repairs never interleave their lines.
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, (line + "\n").encode())
os.close(fd)
with open(os.environ["GOALKEEPER_REPAIR_OUTCOME"], "w", encoding="utf-8") as outcome:
    json.dump(
        {"outcome": "succeeded", "evidence": "The configuration was fixed.", "changed": []},
        outcome,
    )
