# expect: missing_refusal from check_admission(AdmittingScheduler)
patch("except OutOfBlocks:", "except Exception:")  # any error taken for a full pool
