"""trionsq's fuzzing harness: atheris targets (`fuzz.targets`), a network fuzzer against live
daemons (`fuzz.network`) and the ``python -m fuzz`` command (run, list, seed, replay)."""
