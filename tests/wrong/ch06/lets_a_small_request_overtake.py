# expect: wrong_state from check_admission(Wrong)
class Wrong(AdmittingScheduler):
    def admit_waiting(self, plan):
        skipped = []
        while self.waiting:
            super().admit_waiting(plan)
            if not self.waiting or len(self.running) >= self.max_running:
                break
            skipped.append(self.waiting.popleft())  # the one that did not fit: try the next
        self.waiting.extendleft(reversed(skipped))
