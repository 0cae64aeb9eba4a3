# expect: not_finite from check_online_softmax(wrong)
def wrong(tiles):
    out, lse = online_softmax(tiles)
    return out / (lse != -math.inf).float(), lse  # 0 / 0 when every key is masked
