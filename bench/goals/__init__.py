"""Goal trials: whether a Monitor finishes the goals people hand it, with whatever model is
configured.

Each scenario (`catalogue.py`) is a set of plain Kubernetes objects, a Monitor whose task is
written as a new user would write it, how a person answers an approval request, and what
must hold afterwards, read from the cluster (`checks.py`). Whatever the outcome, nothing may
change that the task did not allow (`harm.py`). `python -m bench.goals` runs them
(`runner.py`) and prints a markdown table (`report.py`).
"""
