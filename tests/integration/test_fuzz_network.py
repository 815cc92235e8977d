"""A short run of the network fuzzer (fuzz/network.py): a few Hypothesis sessions of valid,
almost-valid and hostile traffic against a live nsqd and nsqlookupd, each followed by the
liveness, error-code, fd-leak and no-lost-message checks."""

from __future__ import annotations

from fuzz.network import check_well_behaved, live_daemons, run_sessions


def test_network_fuzzer_sessions() -> None:
    with live_daemons() as daemons:
        check_well_behaved(daemons["nsqd"])
        run_sessions(6, daemons)
