# expect: keeps_tiles from check_online_softmax(wrong)
seen = []


def wrong(tiles):  # "in case I need them again"
    return online_softmax(seen.append((s.clone(), v.clone())) or seen[-1] for s, v in tiles)
