"""The `learnproxy` command line: it wires proxy, judges and learner together."""
