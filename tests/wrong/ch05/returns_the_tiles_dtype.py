# expect: wrong_dtype from check_online_softmax(wrong)
def wrong(tiles):
    dtypes = []
    out, lse = online_softmax(dtypes.append(s.dtype) or (s, v) for s, v in tiles)
    return out.to(dtypes[0]), lse.to(dtypes[0])
