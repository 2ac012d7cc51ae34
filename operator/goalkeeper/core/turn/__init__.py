"""One decision in progress, split by concern; each layer imports only those below it:

- `base`: the working status, the effects so far, reports and stops;
- `launches`: which step runs next, and nothing while paused;
- `schedule`: the timer, retries after failures, wakes and the person's controls;
- `approvals`: what waits for a person, and their answers;
- `checks`: the results of steps (checks accepted or rejected, acts done), the brake.
"""
