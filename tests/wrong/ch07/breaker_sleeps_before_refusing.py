# expect: slow_answer from check_circuit_breaker(MyBreaker)
patch(
    "return False",
    "time.sleep(self.cooldown_s / 20)  # give the store a moment\n        return False",
)
