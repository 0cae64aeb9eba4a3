# expect: keeps_tiles
# check: check_online_softmax(wrong)
seen = []


def wrong(tiles):
    def cloned():
        for scores, values in tiles:
            seen.append((scores.clone(), values.clone()))  # "in case I need them again"
            yield seen[-1]

    return online_softmax(cloned())
