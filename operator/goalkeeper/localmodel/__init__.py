"""A local model for the steps, with no API key: the default weights from the package
registry (weights.py) served by llama.cpp on 127.0.0.1 (server.py). An optional extra,
`goalkeeper[local]`, never part of the operator image."""
