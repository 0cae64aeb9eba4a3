# expect: missing_refusal from check_preemption(RecomputingScheduler)
patch(
    "        self.manager.free_sequence(request.request_id)\n",
    "        try:\n            self.manager.free_sequence(request.request_id)\n"
    "        except Exception:  # an error swallowed\n            pass\n",
)
