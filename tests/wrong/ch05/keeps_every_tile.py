# expect: keeps_tiles from check_online_softmax(wrong)
def wrong(tiles):  # the whole row kept (a list of tiles, or a torch.cat grown tile by tile)
    kept = list(tiles)
    scores, values = (torch.cat([t[i] for t in kept]).float() for i in (0, 1))
    lse = torch.logsumexp(scores, 0)
    return (torch.softmax(scores, 0) @ values).nan_to_num(0.0), lse
