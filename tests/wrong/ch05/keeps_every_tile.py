# expect: keeps_tiles
# check: check_online_softmax(wrong)
def wrong(tiles):
    kept = list(tiles)
    scores = torch.cat([s for s, _ in kept]).float()
    values = torch.cat([v for _, v in kept]).float()
    lse = torch.logsumexp(scores, 0)
    if lse == -math.inf:
        return torch.zeros(values.shape[-1]), lse
    return torch.softmax(scores, 0) @ values, lse
