"""The web console (`goalkeeper console`): Monitors, their reports, progress and steps, and
the person's approvals and controls, each done as that person (server.py)."""
