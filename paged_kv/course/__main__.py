"""`python -m paged_kv.course grade [notebooks…] [--timeout SECONDS]`: run your exercise
notebooks (default: exercises/*_exercises.ipynb) and report every check."""

from __future__ import annotations

import sys

from paged_kv.course.grade import main as grade


def main(argv: list[str]) -> int:
    if argv[:1] == ["grade"]:
        return grade(argv[1:])
    if argv[:1] in ([], ["-h"], ["--help"]):
        print(__doc__)
        return 0 if argv else 2
    print(f"unknown command {argv[0]!r}: {__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
