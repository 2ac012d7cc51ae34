"""Test helpers shared by the unit, cluster and end-to-end suites."""
