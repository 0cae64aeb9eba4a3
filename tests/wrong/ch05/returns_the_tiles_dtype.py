# expect: wrong_dtype
# check: check_online_softmax(wrong)
def wrong(tiles):
    dtypes = []

    def noting():
        for scores, values in tiles:
            dtypes.append(scores.dtype)
            yield scores, values

    out, lse = online_softmax(noting())
    return out.to(dtypes[0]), lse.to(dtypes[0])
