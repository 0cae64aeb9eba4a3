# expect: wrong_state from check_admission(AdmittingScheduler)
patch(
    "            try:\n", "            request.status = RequestStatus.RUNNING\n            try:\n"
)
