"""Conformance suite for the nsqd V2 TCP protocol (runs against any nsqd)."""
