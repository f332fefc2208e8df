"""CTest entry point for the Python tests: run_pytest.py LIBRARY TEST_FILE...

Points $DSA_INDEXER_LIBRARY at LIBRARY (the just-built libdsa_indexer.so) and runs pytest
on the given files. Exits 77, which CTest reports as "skipped", when this interpreter has no
pytest; "no tests collected" counts as a failure, not a pass.
"""

import os
import sys


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import pytest
    except ImportError:
        print(f"SKIP: pytest is not installed for {sys.executable} (apt-get install python3-pytest)")
        return 77
    os.environ["DSA_INDEXER_LIBRARY"] = argv[1]
    rc = pytest.main(["-q", "-rs", "-p", "no:cacheprovider", *argv[2:]])
    return 1 if rc == pytest.ExitCode.NO_TESTS_COLLECTED else int(rc)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
