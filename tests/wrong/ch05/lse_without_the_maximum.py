# expect: wrong_result from check_online_softmax(wrong)
def wrong(tiles):
    out, lse = online_softmax(tiles)
    return out, lse - lse.floor() + 0.5
