"""`python -m paged_kv.course grade [notebooks…]`: grade your exercise notebooks."""

from __future__ import annotations

import sys

USAGE = "usage: python -m paged_kv.course grade [notebooks…] [--timeout SECONDS]"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        print("Runs the notebooks (default: exercises/*_exercises.ipynb) and reports every check.")
        return 0 if argv else 2
    if argv[0] != "grade":
        print(f"unknown command {argv[0]!r}\n{USAGE}", file=sys.stderr)
        return 2
    from paged_kv.course.grade import main as grade

    return grade(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
