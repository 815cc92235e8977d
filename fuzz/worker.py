"""One atheris run of one target (``python -m fuzz.worker TARGET [libFuzzer args...]``): trionsq
and the target are imported under atheris' coverage instrumentation."""

from __future__ import annotations

import sys


def main() -> None:
    import atheris

    name = sys.argv[1]
    with atheris.instrument_imports(include=["trionsq", "fuzz.targets"]):
        from fuzz.targets import load

        target = load(name)
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target.test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
