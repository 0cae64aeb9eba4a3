# expect: work_grows from check_constant_time_allocate(Wrong)
class Wrong(FreeListPool):
    @property
    def num_free(self):
        return sum(1 for r in self.ref if r == 0)
