# expect: wrong_state from check_admission(AdmittingScheduler)
patch("            self.waiting.popleft()\n", "")
patch(
    "            try:\n",
    "            self.waiting.popleft()  # a refusal loses it\n            try:\n",
)
