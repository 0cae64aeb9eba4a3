# expect: raised from check_admission(AdmittingScheduler)
patch("except OutOfBlocks:", "except KeyError:")  # OutOfBlocks escapes
