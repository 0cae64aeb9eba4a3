# expect: keeps_tiles
# check: check_online_softmax(wrong)
def wrong(tiles):
    scores = values = None
    for s, v in tiles:
        scores = s.float() if scores is None else torch.cat([scores, s.float()])
        values = v.float() if values is None else torch.cat([values, v.float()])
    lse = torch.logsumexp(scores, 0)
    if lse == -math.inf:
        return torch.zeros(values.shape[-1]), lse
    return torch.softmax(scores, 0) @ values, lse
