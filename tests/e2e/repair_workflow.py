"""A stand-in for a cluster's repair workflow, configured as GOALKEEPER_REPAIR_COMMAND in tests.

It keeps the repair request it was handed (so a test can read what the workflow received)
and reports the repair as done.
"""

import json
import os
import shutil
import sys

marker = sys.argv[1]
shutil.copyfile(os.environ["GOALKEEPER_REPAIR_REQUEST"], marker)
with open(os.environ["GOALKEEPER_REPAIR_OUTCOME"], "w", encoding="utf-8") as outcome:
    json.dump(
        {
            "outcome": "succeeded",
            "evidence": "The configuration change was merged and rolled out.",
            "changed": ["configmap/build-config"],
        },
        outcome,
    )
