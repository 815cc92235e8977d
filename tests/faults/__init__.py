"""The fault suite of replicated topics (issue 30): a Jepsen-style nemesis and checker for a
replicated topic on three nsqd processes (tests/faults/README.md)."""
