"""goalkeeper's benchmarks: `make bench` (or `python -m bench`) measures the operator's
check path against a local control plane; see bench/README.md."""
