"""Course-only helpers: exercise checks and the naive designs the chapters improve on."""
