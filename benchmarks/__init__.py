"""The project's benchmark suites, run from the repository root through one entry point:

    python -m benchmarks list                  # the suites and what each measures
    python -m benchmarks run NAME [options]    # one suite; `run NAME --help` lists its options

A suite is a folder with a module ``suite.py`` that defines ``DESCRIPTION`` and ``main(argv) -> int``;
what suites share lives in ``benchmarks.common``. Results go to ``benchmarks/results/<suite>/``.
"""
